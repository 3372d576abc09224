"""TensorQuantizer against a straightforward float64 reference of the formula, and against
NVIDIA modelopt's fake quantization when the `modelopt` extra is installed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from model_explorer.quantization import (
    TensorQuantizer,
    fake_quantize,
    integer_bounds,
    make_calibrator,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
CASES = list(itertools.product(range(2, 17), [False, True], [False, True], [None, 0, 1]))


def reference(x: torch.Tensor, amax: torch.Tensor, bits: int, unsigned: bool, narrow: bool, axis):
    """q = clamp(round(x * bound / amax), min, bound) * amax / bound, in float64; also returns
    x * scale, the value that was rounded."""
    bound = 2 ** (bits - 1 + int(unsigned)) - 1
    low = 0 if unsigned else (-bound if narrow else -bound - 1)
    amax = amax.double()
    if axis is not None:
        shape = [1] * x.dim()
        shape[axis] = -1
        amax = amax.reshape(shape)
    scaled = x.double() * (bound / amax)
    return torch.clamp(torch.round(scaled), low, bound) * (amax / bound), scaled, amax / bound


def assert_equal_up_to_ties(ours: torch.Tensor, expected: torch.Tensor, scaled: torch.Tensor, step):
    """Equal to float32 precision, except that where x * scale lies within float32 rounding of
    a .5 tie the two may round to neighbouring levels (exactly one step apart)."""
    ours, expected = ours.double().cpu(), expected.cpu()
    step = torch.as_tensor(step).double().cpu().expand_as(expected)
    close = (ours - expected).abs() <= 1e-6 * expected.abs() + 1e-12
    if close.all():
        return
    scaled = scaled.cpu()
    tie_distance = (scaled - scaled.floor() - 0.5).abs()
    ulp = torch.finfo(torch.float32).eps * scaled.abs().clamp_min(1.0)
    off = ~close
    assert (tie_distance[off] <= 4 * ulp[off]).all(), (
        "a value far from a tie was quantized differently"
    )
    one_step = ((ours - expected).abs() - step).abs() <= 1e-6 * expected.abs() + 1e-12
    assert one_step[off].all()
    assert off.float().mean() < 1e-3


def sample(device: str, axis) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(6, 5, 40, generator=generator) * 3).to(device)
    if axis is None:
        amax = x.abs().amax() * 0.7  # some values clip
    else:
        dims = [d for d in range(x.dim()) if d != axis]
        amax = x.abs().amax(dim=dims) * 0.7
        amax[0] = 0.0  # a dead channel
    return x, amax


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("autograd", [False, True], ids=["inference", "autograd"])
@pytest.mark.parametrize("bits, unsigned, narrow, axis", CASES)
def test_matches_the_formula(device, autograd, bits, unsigned, narrow, axis) -> None:
    # With autograd the fused ATen kernels run; without, on the CPU, the in-place steps do.
    x, amax = sample(device, axis)
    quantizer = TensorQuantizer(bits, axis=axis, unsigned=unsigned, narrow_range=narrow).to(device)
    quantizer.amax = amax
    ours = quantizer(x.requires_grad_(autograd)).detach()
    x = x.detach()
    expected, scaled, step = reference(x, amax, bits, unsigned, narrow, axis)
    if axis is not None:  # a zero amax quantizes its channel to zero
        expected.select(axis, 0).zero_()
    assert ours.dtype == x.dtype and ours.device == x.device
    assert_equal_up_to_ties(ours, expected, scaled, step)
    step = step.cpu().expand_as(expected)
    levels = torch.round(ours.double().cpu()[step > 0] / step[step > 0])
    low, high = integer_bounds(bits, unsigned, narrow)
    assert levels.min() >= low and levels.max() <= high


def test_gradients_pass_straight_through_inside_the_range() -> None:
    amax, bits = 2.0, 4
    step = amax / (2 ** (bits - 1) - 1)
    x = torch.cat(
        [
            torch.linspace(-amax, amax, 101),  # inside: gradient 1
            torch.linspace(amax + step, 10, 20),  # beyond the top level: 0
            torch.linspace(-10, -amax - 2 * step, 20),  # beyond the lowest level: 0
        ]
    ).requires_grad_()
    quantizer = TensorQuantizer(bits)
    quantizer.amax = amax
    quantizer(x).mul(torch.arange(len(x))).sum().backward()
    expected = torch.cat([torch.arange(101.0), torch.zeros(40)])
    assert torch.equal(x.grad, expected)


def test_amax_shape_and_bits_are_checked() -> None:
    quantizer = TensorQuantizer(8)
    with pytest.raises(ValueError, match="shape \\(\\) for a per-tensor quantizer"):
        quantizer.amax = torch.ones(3)
    with pytest.raises(ValueError, match="must not be negative"):
        quantizer.amax = -1.0
    with pytest.raises(ValueError, match="from 2 to 16"):
        quantizer.num_bits = 17
    with pytest.raises(RuntimeError, match="no amax yet"):
        quantizer(torch.ones(3))
    quantizer.enabled = False
    assert torch.equal(quantizer(torch.ones(3)), torch.ones(3))


def test_calibration_mode_passes_data_through_and_feeds_the_calibrator() -> None:
    quantizer = TensorQuantizer(4, calibrator=make_calibrator("mse"))
    quantizer.start_calibration()
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    assert quantizer(x) is x
    quantizer.finish_calibration()
    at_four = quantizer.amax.clone()
    assert not quantizer.calibrating
    assert not torch.equal(quantizer(x), x)
    # The amax for a new bit width comes from the kept histogram, no data needed.
    quantizer.num_bits = 8
    assert torch.equal(quantizer.amax, quantizer.calibrator.compute_amax(8))
    assert quantizer.amax > at_four
    quantizer.num_bits = 4
    assert torch.equal(quantizer.amax, at_four)


@pytest.mark.parametrize("bits, unsigned, narrow, axis", [c for c in CASES if c[3] != 1])
def test_matches_modelopt(bits: int, unsigned: bool, narrow: bool, axis) -> None:
    pytest.importorskip("modelopt.torch.quantization")
    from modelopt.torch.quantization.config import QuantizerAttributeConfig
    from modelopt.torch.quantization.nn import TensorQuantizer as ModeloptQuantizer

    x, amax = sample("cpu", axis)
    if unsigned:
        x = x.abs()  # modelopt refuses negative inputs to unsigned quantizers
    theirs = ModeloptQuantizer(
        QuantizerAttributeConfig(num_bits=bits, axis=axis, unsigned=unsigned, narrow_range=narrow)
    )
    theirs.amax = amax if axis is None else amax.reshape(-1, 1, 1)
    ours = TensorQuantizer(bits, axis=axis, unsigned=unsigned, narrow_range=narrow)
    ours.amax = amax
    with torch.no_grad():
        expected = theirs(x)
    _, scaled, step = reference(x, amax, bits, unsigned, narrow, axis)
    assert_equal_up_to_ties(ours(x), expected.double(), scaled, step)


def test_half_precision_inputs_keep_their_dtype() -> None:
    x = torch.randn(100).half()
    out = fake_quantize(x, torch.tensor(2.0), 8)
    assert out.dtype == torch.float16
    np.testing.assert_allclose(
        out.float().numpy(), fake_quantize(x.float(), torch.tensor(2.0), 8).numpy(), rtol=1e-3
    )


def ties(multiplier: float) -> tuple[torch.Tensor, list[float]]:
    """Every midpoint (k + 1/2) / multiplier from -130 to 130 levels (exact in float32, and so
    is its product with the multiplier, a power of two), and the level each rounds to, half
    to even, by Python's round, clamped to 8 bits' [-128, 127]."""
    halves = [k + 0.5 for k in range(-130, 130)]
    x = torch.tensor(halves, dtype=torch.float32) / multiplier
    return x, [float(min(max(round(h), -128), 127)) for h in halves]


@pytest.mark.parametrize(
    "path",
    [pytest.param("kernel", marks=pytest.mark.kernels), "steps", "autograd"],
)
def test_ties_round_half_to_even_on_every_path(path: str, monkeypatch) -> None:
    """The formula's round is to nearest, ties to even, exactly, on every path a tensor can
    take: the C kernel, the four eager steps (the kernels off) and ATen's fused kernel (a
    gradient wanted); per tensor and per channel, at a multiplier of 1 and of 4. The levels
    are compared with Python's round and with torch.fake_quantize_per_tensor_affine."""
    from model_explorer.formats import kernels
    from model_explorer.native import ENVIRONMENT_SWITCH

    taken = []
    if path == "kernel":
        monkeypatch.setattr(kernels, "INTEGER_SMALLEST", 0)
        original = kernels.native_integer

        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            out = original(*args, **kwargs)
            taken.append(out is not None)
            return out

        monkeypatch.setattr(kernels, "native_integer", counted)
    elif path == "steps":
        monkeypatch.setenv(ENVIRONMENT_SWITCH, "0")
    assert round(0.5) == 0 and round(1.5) == 2 and round(-2.5) == -2  # Python's, half to even
    for multiplier in (1.0, 4.0):
        x, levels = ties(multiplier)
        expected = torch.tensor(levels) / multiplier
        amax = torch.tensor(127 / multiplier)
        per_tensor = TensorQuantizer(8)
        per_tensor.amax = amax
        per_channel = TensorQuantizer(8, axis=0)
        per_channel.amax = torch.stack([amax, torch.tensor(127 / 2.0)])
        rows = torch.stack([x, x])  # the second channel at another scale: no ties there
        with torch.set_grad_enabled(path == "autograd"):
            graded = path == "autograd"
            ours = per_tensor(x.clone().requires_grad_(graded)).detach()
            by_row = per_channel(rows.clone().requires_grad_(graded)).detach()[0]
        assert torch.equal(ours, expected), multiplier
        assert torch.equal(by_row, expected), multiplier
        aten = torch.fake_quantize_per_tensor_affine(x, 1 / multiplier, 0, -128, 127)
        assert torch.equal(aten, expected)
    if path == "kernel":
        if not any(taken):
            pytest.skip("the C kernel cannot be built on this machine")
        assert all(taken)
