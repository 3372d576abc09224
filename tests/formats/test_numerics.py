"""The numerics of the quantizer formats against oracles, never against themselves: value tables
built here from each format's definition, torch's float8 casts, torchao's MX and NVFP4 emulation
and modelopt's FP8 and block-integer fake quantization (when installed), and hand computations of
the edge cases. Where torchao or modelopt departs from the spec, a test shows the difference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_explorer.formats.blocks import (
    fp8_fake_quantize,
    group_int_fake_quantize,
    mx_fake_quantize,
    nvfp4_fake_quantize,
)
from model_explorer.formats.elements import ELEMENTS, cast_element

E4M3, E5M2, E2M1, INT8 = (ELEMENTS[name] for name in ("e4m3", "e5m2", "e2m1", "int8"))
MINIFLOATS = ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"]
NAN, INF = float("nan"), float("inf")


def assert_same(ours: torch.Tensor, expected: torch.Tensor, signed_zeros: bool = False) -> None:
    """Equal value for value (NaN where, and only where, the oracle has NaN), same dtype."""
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    ours, expected = ours.detach().cpu(), expected.detach().cpu()
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(ours), nan), "NaN in different places"
    differ = (ours != expected) & ~nan
    assert not differ.any(), (
        f"{int(differ.sum())} values differ, e.g. {ours[differ][:5].tolist()} "
        f"instead of {expected[differ][:5].tolist()}"
    )
    if signed_zeros:
        assert torch.equal(torch.signbit(ours[~nan]), torch.signbit(expected[~nan]))


def sample(*shape: int, spread: int = 20, seed: int = 0) -> torch.Tensor:
    """Normal values, each row (all but the last dimension) scaled by its own power of two."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=generator)
    powers = torch.randint(-spread, spread + 1, (*shape[:-1], 1), generator=generator)
    return x * torch.exp2(powers.float())


# -- the element types, from their definitions -----------------------------------------------------
# Codes that are not numbers: E4M3's S.1111.111 (NaN), E5M2's exponent 31 (Inf and NaN, as in IEEE
# 754). FP6 and FP4 reserve none.
RESERVED = {
    "e4m3": lambda code, fraction: code == 15 and fraction == 7,
    "e5m2": lambda code, _: code == 31,
}


def magnitudes(name: str) -> np.ndarray:
    """Every non-negative value of an element type in code order: (-1)**s * 2**(code - bias) *
    (1 + f / 2**m) with bias 2**(e-1) - 1, subnormals 2**(1 - bias) * f / 2**m at code 0; MX INT8
    k / 64 for k from 0 to 127."""
    if name == "int8":
        return np.arange(128) / 64
    e, m = int(name[1]), int(name[3])
    bias = 2 ** (e - 1) - 1
    reserved = RESERVED.get(name, lambda code, fraction: False)
    values = [
        2.0 ** (1 - bias) * f / 2**m if code == 0 else 2.0 ** (code - bias) * (1 + f / 2**m)
        for code in range(2**e)
        for f in range(2**m)
        if not reserved(code, f)
    ]
    return np.array(values)


def reference_round(v: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Round to the nearest of `table` (ascending magnitudes in code order), ties to the even
    code, saturating at the largest (±Inf too), in float64 where every step is exact."""
    magnitude = np.minimum(np.abs(v), table[-1])
    upper = np.clip(np.searchsorted(table, np.nan_to_num(magnitude)), 1, len(table) - 1)
    low, high = table[upper - 1], table[upper]
    below, above = magnitude - low, high - magnitude
    take_high = (above < below) | ((above == below) & (upper % 2 == 0))
    rounded = np.copysign(np.where(take_high, high, low), v)
    return np.where(np.isnan(v), np.nan, rounded)


def queries(table: np.ndarray) -> np.ndarray:
    """Every value, every midpoint between neighbours and the float32 values either side of it,
    values beyond the largest (the tie above it too), ±Inf, tiny values, ±0 and NaN."""
    mids = ((table[1:] + table[:-1]) / 2).astype(np.float32)
    step = table[-1] - table[-2]
    smallest = table[1]
    extra = [table[-1] * 1.01, table[-1] + step / 2, table[-1] + step, 1e30, np.inf]
    extra += [smallest / 4, smallest / 2, smallest * 0.75, 1e-30, 1e-45]
    values = np.concatenate(
        [table, mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))]
        + [np.array(extra)]
    ).astype(np.float32)
    return np.concatenate([values, -values, np.array([np.nan], np.float32)])


@pytest.mark.parametrize("name", [*MINIFLOATS, "int8"])
def test_element_constants_follow_from_the_definition(name: str) -> None:
    element, table = ELEMENTS[name], magnitudes(name)
    assert element.max_normal == table[-1]
    assert element.emax == int(np.floor(np.log2(table[-1])))
    assert element.smallest_subnormal == table[1]
    integer_bit = name == "int8"  # MX INT8: sign, one integer bit, six fraction bits
    assert element.bits == 1 + element.exponent_bits + element.mantissa_bits + integer_bit


@pytest.mark.parametrize("name", [*MINIFLOATS, "int8"])
def test_cast_rounds_every_value_and_midpoint_as_the_definition(name: str) -> None:
    table = magnitudes(name)
    x = torch.from_numpy(queries(table))
    expected = torch.from_numpy(reference_round(x.double().numpy(), table).astype(np.float32))
    assert_same(cast_element(x, ELEMENTS[name]), expected, signed_zeros=True)


@pytest.mark.parametrize("name", [*MINIFLOATS, "int8"])
def test_cast_rounds_random_values_over_a_wide_range_as_the_definition(name: str) -> None:
    x = sample(20000, 1, spread=30).reshape(-1)
    expected = reference_round(x.double().numpy(), magnitudes(name)).astype(np.float32)
    assert_same(cast_element(x, ELEMENTS[name]), torch.from_numpy(expected), signed_zeros=True)


@pytest.mark.parametrize(
    "name, dtype", [("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)]
)
def test_the_definition_and_cast_element_agree_with_torch_float8(name: str, dtype) -> None:
    codes = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    assert sorted(set(codes[torch.isfinite(codes)].abs().tolist())) == magnitudes(name).tolist()
    x = torch.from_numpy(queries(magnitudes(name)))
    limit = ELEMENTS[name].max_normal
    expected = (
        x.clamp(-limit, limit).to(dtype).float()
    )  # torch's casts do not saturate by themselves
    assert_same(cast_element(x, ELEMENTS[name]), expected, signed_zeros=True)


def test_mx_int8_is_symmetric_and_saturates() -> None:
    x = torch.tensor([1.999, -1.999, -2.0, -INF, 0.5 / 64, 1.5 / 64, NAN])
    expected = torch.tensor([127, -127, -127, -127, 0, 2, NAN]) / 64
    assert_same(cast_element(x, INT8), expected)


# -- MX against torchao's emulation ----------------------------------------------------------------
def torchao_mx(x: torch.Tensor, name: str, block_size: int = 32) -> torch.Tensor:
    """torchao's MX round trip along the last dimension: to_mx with the spec's FLOOR scale, back
    with to_dtype."""
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2

    elem_dtype = {
        "e4m3": torch.float8_e4m3fn,
        "e5m2": torch.float8_e5m2,
        "e3m2": DTYPE_FP6_E3M2,
        "e2m3": DTYPE_FP6_E2M3,
        "e2m1": torch.float4_e2m1fn_x2,
    }[name]
    scale, data = mx.to_mx(
        x.contiguous(), elem_dtype, block_size, scaling_mode=ScaleCalculationMode.FLOOR
    )
    return mx.to_dtype(data, scale, elem_dtype, block_size, x.dtype)


def mx_sample(name: str, rows: int = 6, blocks: int = 8, seed: int = 0) -> torch.Tensor:
    """Blocks of 32 at magnitudes from 2**-20 to 2**20 with, in the first row, an all-zero
    block, a block of exact ties (the element's midpoints, scaled), a block with one huge value,
    a block holding NaN and a block of float32 subnormals next to a normal value."""
    element, table = ELEMENTS[name], magnitudes(name)
    x = sample(rows, blocks, 32, seed=seed)
    x[0, 0] = 0.0
    mids = (table[1:] + table[:-1]) / 2
    ties = np.concatenate([[table[-1]], mids[np.linspace(0, len(mids) - 1, 31).astype(int)]])
    x[0, 1] = torch.from_numpy(ties).float() * 2.0**3 * torch.tensor([1.0, -1.0]).repeat(16)
    x[0, 2, 7] = 1e6
    x[0, 3, 4] = NAN
    x[0, 4] = 1e-40
    x[0, 4, 0] = 2.0 ** (element.emax - 100)
    return x.reshape(rows, blocks * 32)


@pytest.mark.parametrize("name", MINIFLOATS)
def test_mx_matches_torchao(name: str) -> None:
    x = mx_sample(name)
    assert_same(mx_fake_quantize(x, ELEMENTS[name]), torchao_mx(x, name))


@pytest.mark.parametrize("name", ["e4m3", "e2m1"])
def test_mx_matches_torchao_in_bfloat16(name: str) -> None:
    x = mx_sample(name, seed=1).bfloat16()
    assert_same(mx_fake_quantize(x, ELEMENTS[name]), torchao_mx(x, name))


def test_mx_blocks_along_the_channels_of_nchw_and_the_rows_of_a_weight() -> None:
    activations = sample(2, 64, 5, 3, seed=2)
    along_channels = torchao_mx(activations.movedim(1, -1), "e3m2").movedim(-1, 1)
    assert_same(mx_fake_quantize(activations, ELEMENTS["e3m2"], axis=1), along_channels)
    weight = sample(64, 24, seed=3)
    assert_same(mx_fake_quantize(weight, E4M3, axis=0), torchao_mx(weight.T, "e4m3").T)


def test_mx_pads_a_last_partial_block_with_zeros() -> None:
    x = sample(4, 40, seed=4)
    padded = torch.cat([x, torch.zeros(4, 24)], dim=1)
    assert_same(mx_fake_quantize(x, E2M1), torchao_mx(padded, "e2m1")[:, :40])
    assert_same(mx_fake_quantize(x.T, E2M1, axis=0), torchao_mx(padded, "e2m1")[:, :40].T)


def test_mx_edge_cases_by_hand() -> None:
    x = torch.zeros(6, 8)
    # amax 4: X = 2**(2 - 2) = 1; ties go to the even code; 7 saturates to 6
    x[0] = torch.tensor([4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, -0.25])
    x[1] = torch.tensor([7.0, 5.5, 5.0, -7.0, 0.0, 0.0, 0.0, 0.0])
    # amax 8: X = 2; 0.3 / 2 rounds to the subnormal 0.5 (on the grid of 0.5 below 1)
    x[2] = torch.tensor([8.0, 0.3, 0.2, 0.6, 0.0, 0.0, 0.0, -8.0])
    x[4, 3] = NAN
    x[5, 1] = -INF  # the rest of the row is finite
    expected = torch.zeros(6, 8)
    expected[0] = torch.tensor([4.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, -0.0])
    expected[1] = torch.tensor([6.0, 6.0, 4.0, -6.0, 0.0, 0.0, 0.0, 0.0])
    expected[2] = torch.tensor([8.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -8.0])
    expected[4:] = NAN  # a block holding NaN, and one holding Inf: scale NaN
    assert_same(mx_fake_quantize(x, E2M1, block_size=8), expected)


def test_mx_one_huge_value_flushes_the_rest_of_its_block() -> None:
    # amax 1e6: X = 2**(19 - 8); 1 / 2048 is below half E4M3's smallest subnormal 2**-9, 2 / 2048
    # is exactly half (a tie: to 0, the even code), 3 / 2048 rounds up to 2**-9; 1e6 saturates.
    x = torch.tensor([[1e6, 1.0, 2.0, 3.0, -3.0, 0.0, 0.0, 0.0]])
    expected = torch.tensor([[448.0 * 2048, 0.0, 0.0, 4.0, -4.0, 0.0, 0.0, 0.0]])
    assert_same(mx_fake_quantize(x, E4M3, block_size=8), expected)


def test_mx_int8_by_hand() -> None:
    # torchao 0.18 has no MX INT8 ("TODO(future PR): add support for MX int8"): the spec by hand.
    # amax 2: X = 2**(1 - 0); 0.3 / 2 = 9.6 / 64 -> 10 / 64; 1.999 alone: X = 1, 127 / 64 at most
    x = torch.tensor([[2.0, 0.3, -1.0, 1 / 128], [1.999, -1.999, 0.5, 0.0]])
    expected = torch.tensor([[128 / 64, 20 / 64, -1.0, 0.0], [127 / 64, -127 / 64, 0.5, 0.0]])
    assert_same(mx_fake_quantize(x, INT8, block_size=4), expected)


def test_mx_tiny_blocks_take_e8m0s_smallest_scale_where_torchao_halves_them() -> None:
    # amax 1.5 * 2**-125 in E2M1 (emax 2): X = 2**-127, E8M0's smallest, and both values are
    # elements (6 and 1.5) times X. torchao divides by 2**-126 (it keeps its float32 scale
    # normal) but multiplies back by the stored code's 2**-127: 6 * X comes back as 3 * X, and
    # 1.5 * X, divided to 0.75, rounds to 1.0 (a tie to even).
    x = torch.zeros(1, 32)
    x[0, :2] = torch.tensor([6.0, 1.5]) * 2.0**-127
    assert_same(mx_fake_quantize(x, E2M1), x.clone())
    theirs = torchao_mx(x, "e2m1")
    assert theirs[0, :2].tolist() == [3.0 * 2.0**-127, 1.0 * 2.0**-127]


def test_mx_blocks_holding_inf_are_nan_where_torchao_keeps_the_inf() -> None:
    x = sample(1, 32, seed=5)
    x[0, 3] = INF
    assert torch.isnan(mx_fake_quantize(x, E4M3)).all()
    theirs = torchao_mx(x, "e4m3")
    assert theirs[0, 3] == INF and (theirs[0, :3] == 0).all()


# -- NVFP4 against torchao's emulation -------------------------------------------------------------
def torchao_nvfp4(x: torch.Tensor, amax: torch.Tensor | None) -> torch.Tensor:
    """torchao's NVFP4 round trip along the last dimension, with the per-tensor scale of `amax`
    or, for None, without one (single-level scaling)."""
    nvfp4 = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    scale = None if amax is None else nvfp4.per_tensor_amax_to_scale(amax)
    return nvfp4.NVFP4Tensor.to_nvfp4(x.contiguous(), per_tensor_scale=scale).dequantize(x.dtype)


def nvfp4_sample(seed: int, spread: int = 4) -> torch.Tensor:
    """Blocks of 16 within 2**±spread of each other (so that no block scale falls below E4M3's
    smallest normal, where torchao clamps it), an all-zero block, one with ±Inf, one with NaN."""
    x = sample(4, 12, 16, spread=spread, seed=seed)
    x[0, 0] = 0.0
    x[0, 1, 3], x[0, 1, 9] = INF, -INF
    x[0, 2, 5] = NAN
    return x.reshape(4, 192)


@pytest.mark.parametrize("calibrated", [1.0, 0.3], ids=["max", "clipping"])
def test_nvfp4_matches_torchao_with_a_per_tensor_scale(calibrated: float) -> None:
    x = nvfp4_sample(seed=6)
    amax = x[x.isfinite()].abs().max() * calibrated
    assert_same(nvfp4_fake_quantize(x, amax), torchao_nvfp4(x, amax))


def test_nvfp4_matches_torchao_without_a_per_tensor_scale() -> None:
    # amax 6 * 448 makes the per-tensor scale exactly 1: torchao's single-level scaling
    x = nvfp4_sample(seed=7) * 4  # block scales from 2**-4
    assert_same(nvfp4_fake_quantize(x, torch.tensor(6.0 * 448)), torchao_nvfp4(x, None))


def test_nvfp4_along_axis_0_and_in_bfloat16() -> None:
    weight = sample(64, 24, spread=3, seed=8)
    amax = weight.abs().max()
    assert_same(nvfp4_fake_quantize(weight, amax, axis=0), torchao_nvfp4(weight.T, amax).T)
    x = nvfp4_sample(seed=9).bfloat16()
    amax = x.float()[x.float().isfinite()].abs().max()
    assert_same(nvfp4_fake_quantize(x, amax), torchao_nvfp4(x, amax))


def test_nvfp4_small_block_scales_are_e4m3_subnormals_where_torchao_clamps_them() -> None:
    # per-tensor scale 1: block amax 0.03 gives the scale 0.005, the E4M3 subnormal 3 * 2**-9;
    # 0.03 / (3 * 2**-9) = 5.12 rounds to the element 6. torchao raises the scale to 2**-6:
    # 0.03 / 2**-6 = 1.92 -> 2, so 2**-5.
    x = torch.zeros(1, 16)
    x[0, 0] = 0.03
    amax = torch.tensor(6.0 * 448)
    assert nvfp4_fake_quantize(x, amax)[0, 0] == 6 * 3 * 2.0**-9
    assert torchao_nvfp4(x, amax)[0, 0] == 2.0**-5


def test_nvfp4_edge_cases_by_hand() -> None:
    # per-tensor scale 2: a block scale that rounds to zero (below 2**-10 after the per-tensor
    # scale) zeroes its block; Inf saturates the block scale at 448 and itself at 6 * 448 * 2,
    # where 3000 / (448 * 2) = 3.35 rounds to 3.
    amax = torch.tensor(2 * 6.0 * 448)
    x = torch.zeros(3, 16)
    x[0, 0] = 6 * 2 * 2.0**-10.5
    x[1, :2] = torch.tensor([-INF, 3000.0])
    x[2, :4] = torch.tensor(
        [12.0, 6.0, -3.0, 1.6]
    )  # block scale exactly 1: the elements themselves
    expected = torch.zeros(3, 16)
    expected[1, :2] = torch.tensor([-6 * 448 * 2.0, 3 * 448 * 2.0])
    expected[2, :4] = torch.tensor([12.0, 6.0, -3.0, 2.0])
    assert_same(nvfp4_fake_quantize(x, amax), expected)
    assert_same(nvfp4_fake_quantize(x, torch.tensor(0.0)), torch.zeros(3, 16))


# -- scaled FP8 and group-wise integers against modelopt -------------------------------------------
def modelopt_quantizer(**config):
    """modelopt's TensorQuantizer (fake quantization on the CPU) with these attributes."""
    pytest.importorskip("modelopt.torch.quantization")
    from modelopt.torch.quantization.config import QuantizerAttributeConfig
    from modelopt.torch.quantization.nn import TensorQuantizer

    return TensorQuantizer(QuantizerAttributeConfig(**config))


def weight_and_amax(axis: int | None, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A conv weight with channels a few powers of two apart, and an amax below its max (the
    largest values saturate)."""
    weight = sample(16, 8, 3, 3, spread=6, seed=seed)
    if axis is None:
        return weight, weight.abs().amax() * 0.8
    return weight, weight.abs().amax(dim=(1, 2, 3)) * 0.8


@pytest.mark.parametrize("axis", [None, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fp8_e4m3_matches_modelopt(axis: int | None, dtype: torch.dtype) -> None:
    weight, amax = weight_and_amax(axis, seed=10)
    weight = weight.to(dtype)
    theirs = modelopt_quantizer(num_bits=(4, 3), axis=axis)
    theirs.amax = amax if axis is None else amax.reshape(-1, 1, 1, 1)
    with torch.no_grad():
        expected = theirs(weight)
    assert_same(fp8_fake_quantize(weight, amax, E4M3, axis=axis), expected)


def test_fp8_zero_amax_quantizes_to_zero_where_modelopt_takes_amax_one() -> None:
    weight, amax = weight_and_amax(0, seed=11)
    amax[3] = 0.0
    theirs = modelopt_quantizer(num_bits=(4, 3), axis=0)
    theirs.amax = amax.reshape(-1, 1, 1, 1)
    with torch.no_grad():
        expected = theirs(weight)
    ours = fp8_fake_quantize(weight, amax, E4M3, axis=0)
    assert (ours[3] == 0).all() and not (expected[3] == 0).all()
    keep = torch.arange(16) != 3
    assert_same(ours[keep], expected[keep])


def test_fp8_e5m2_by_hand() -> None:
    # modelopt refuses static E5M2; torch's cast of x * 57344 / amax, saturated, is the oracle.
    weight, amax = weight_and_amax(0, seed=12)
    weight[0, 0, 0, :3] = torch.tensor([INF, -INF, NAN])
    scale = 57344.0 / amax.reshape(-1, 1, 1, 1)
    cast = (weight * scale).clamp(-57344.0, 57344.0).to(torch.float8_e5m2).float()
    expected = cast * (1.0 / scale)
    ours = fp8_fake_quantize(weight, amax, E5M2, axis=0)
    assert_same(ours, expected)
    assert ours[0, 0, 0, 0] == 57344.0 * (1.0 / scale[0]).squeeze()  # Inf saturates to ~amax


@pytest.mark.parametrize(
    "bits, group, unsigned, narrow",
    [(4, 32, False, False), (4, 128, False, True), (8, 64, False, False), (3, 16, True, False)],
)
def test_group_int_matches_modelopt_static_blocks(bits, group, unsigned, narrow) -> None:
    x = sample(12, 300, spread=8, seed=13)  # 300: a last partial group
    x = x.abs() if unsigned else x  # modelopt refuses negative inputs to unsigned quantizers
    x[0, :group] = 0.0
    config = {"num_bits": bits, "unsigned": unsigned, "narrow_range": narrow}
    with torch.no_grad():
        expected = modelopt_quantizer(**config, block_sizes={-1: group})(x)
    ours = group_int_fake_quantize(x, bits, group, -1, unsigned, narrow, scale_dtype=None)
    assert_same(ours, expected)
    # groups down the columns of the transpose (a weight's input channels along axis 0)
    ours = group_int_fake_quantize(x.T, bits, group, 0, unsigned, narrow, scale_dtype=None)
    assert_same(ours, expected.T)


def test_group_int_scales_stored_in_float16_by_hand() -> None:
    # 4 bits, bound 7. amax 1: s = fp16(1 / 7) = 0.142822265625, 1 / s = 7.0017 -> 7, 7 * s;
    # 0.5 / s = 3.5009 -> 4. amax 1e6: s saturates at 65504, 1e6 / s = 15.3 clips at 7.
    # amax 1e-7 (above 2**-24): s = 1.4e-8 underflows float16 to 0, the group to zeros.
    x = torch.tensor([[1.0, 0.5, -0.2, 0.0], [1e6, -2e5, 0.0, 0.0], [1e-7, 0.0, 0.0, 0.0]])
    s = 0.142822265625
    expected = torch.tensor(
        [[7 * s, 4 * s, -1 * s, 0.0], [7 * 65504.0, -3 * 65504.0, 0.0, 0.0], [0.0] * 4]
    )
    assert_same(group_int_fake_quantize(x, 4, 4), expected)
    # None keeps the float32 formula: 1.0 exactly
    assert group_int_fake_quantize(x, 4, 4, scale_dtype=None)[0, 0] == 1.0


def test_group_int_nan_and_inf_groups_are_nan() -> None:
    x = torch.tensor([[1.0, NAN, 2.0, 3.0], [1.0, INF, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]])
    for scale_dtype in (None, torch.float16, torch.bfloat16):
        out = group_int_fake_quantize(x, 8, 4, scale_dtype=scale_dtype)
        assert out[:2].isnan().all() and out[2].isfinite().all()


# -- every function: gradients, dtypes, shapes, devices --------------------------------------------
FUNCTIONS = {
    "cast_element": lambda x: cast_element(x, ELEMENTS["e2m3"]),
    "fp8": lambda x: fp8_fake_quantize(x, torch.tensor(3.0), E4M3),
    "fp8_per_channel": lambda x: fp8_fake_quantize(x, torch.linspace(1, 4, x.shape[0]), E5M2, 0),
    "mx": lambda x: mx_fake_quantize(x, E2M1, axis=1),
    "mx_int8": lambda x: mx_fake_quantize(x, INT8, block_size=16, axis=0),
    "nvfp4": lambda x: nvfp4_fake_quantize(x, torch.tensor(5.0)),
    "group_int": lambda x: group_int_fake_quantize(x, 4, 32, axis=-2),
    "group_int_float32": lambda x: group_int_fake_quantize(x, 8, 16, scale_dtype=None),
}


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_gradients_pass_straight_through(name: str, dtype: torch.dtype) -> None:
    x = sample(8, 40, 6, spread=2, seed=14).to(dtype).requires_grad_()
    out = FUNCTIONS[name](x)
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    with torch.no_grad():
        assert_same(out, FUNCTIONS[name](x))  # the same values as without autograd


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_are_computed_in_float32_and_keep_their_dtype(name, dtype) -> None:
    x = sample(8, 40, 6, spread=2, seed=15).to(dtype)
    out = FUNCTIONS[name](x)
    assert not out.requires_grad
    expected = FUNCTIONS[name](x.float())
    assert_same(out, expected if name == "cast_element" else expected.to(dtype))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_empty_tensors(name: str) -> None:
    assert FUNCTIONS[name](torch.empty(8, 0, 6)).shape == (8, 0, 6)


SCALAR_FUNCTIONS = {
    "cast_element": lambda x: cast_element(x, E2M1),
    "fp8": lambda x: fp8_fake_quantize(x, torch.tensor(3.0), E4M3),
    "mx": lambda x: mx_fake_quantize(x, E2M1),
    "nvfp4": lambda x: nvfp4_fake_quantize(x, torch.tensor(5.0)),
    "group_int": lambda x: group_int_fake_quantize(x, 4, 32),
}


@pytest.mark.parametrize("name", SCALAR_FUNCTIONS)
def test_a_scalar_is_quantized_as_a_block_of_one(name: str) -> None:
    function = SCALAR_FUNCTIONS[name]
    x = torch.tensor([-1.3])
    assert_same(function(x.reshape(())), function(x).reshape(()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", FUNCTIONS)
def test_cuda_computes_what_the_cpu_computes(name: str) -> None:
    x = sample(8, 40, 6, spread=20, seed=17)
    x[0, 0, :3] = torch.tensor([NAN, INF, -INF])
    amax_on_cpu = FUNCTIONS[name](x)
    assert_same(FUNCTIONS[name](x.cuda()), amax_on_cpu)
