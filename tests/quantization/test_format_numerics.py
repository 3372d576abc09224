"""The numerics of the quantizer formats against oracles, never against themselves: value tables
built here from each format's definition, torch's float8 casts, torchao's MX and NVFP4 emulation
and modelopt's FP8 and block-integer fake quantization (when installed), and hand computations of
the edge cases. Where torchao or modelopt departs from the spec, a test shows the difference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_explorer.quantization.formats import ELEMENTS, cast_element

INT8 = ELEMENTS["int8"]
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


def test_cast_passes_gradients_straight_through() -> None:
    x = sample(50, 4, spread=3, seed=18).requires_grad_()
    cast_element(x, ELEMENTS["e2m3"]).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
