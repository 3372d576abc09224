"""The compiled passes of the fake quantization (formats/compiled.py), bit for bit: the integer
format against NumPy's float32 arithmetic of its formula, MX, NVFP4 and FP8 against their
eager steps (which tests/formats/test_numerics.py checks against the peers); and the way back
to the eager steps."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from model_explorer.formats import compiled
from model_explorer.formats.blocks import fp8_fake_quantize, mx_fake_quantize, nvfp4_fake_quantize
from model_explorer.formats.elements import ELEMENTS
from model_explorer.formats.integer import (
    apply_quantization,
    asymmetric_params,
    quant_params,
)

SIZE = compiled.FUSED_MIN_VALUES + 4093  # past the threshold, not a multiple of a vector
NATIVE_INTEGER = compiled.native_integer  # the C kernel, before the fixture below sets it aside


@pytest.fixture(autouse=True)
def compiled_from_the_first_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The passes from the first tensor past their thresholds, not once they pay, here; the
    C kernel, which the integer format takes first, out of the way (tested at the end)."""
    monkeypatch.setenv(compiled.ENVIRONMENT_SWITCH, "1")
    monkeypatch.setattr(compiled, "native_integer", lambda *args: None)


@torch.inference_mode()
def hard_values(multiplier: float) -> torch.Tensor:
    """Random values, the rounding midpoints (k + 1/2) / multiplier and their neighbours, signed
    zeros, ±Inf, NaN, float32 subnormals and values far beyond the range, in one tensor (an
    inference tensor, as a search's activations are)."""
    generator = torch.Generator().manual_seed(0)
    values = torch.randn(SIZE, generator=generator) * 3
    levels = torch.arange(-300, 300, dtype=torch.float32) + 0.5
    midpoints = levels / multiplier
    special = torch.tensor(
        [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-45, -1e-45, 1e-39, 3e38, -3e38]
    )
    planted = torch.cat(
        [
            midpoints,
            torch.nextafter(midpoints, torch.tensor(float("inf"))),
            torch.nextafter(midpoints, torch.tensor(float("-inf"))),
            special,
        ]
    )
    values[: planted.numel()] = planted
    return values.reshape(-1, 7) if SIZE % 7 == 0 else values


def numpy_formula(x: torch.Tensor, params) -> np.ndarray:  # noqa: ANN001
    """The formula in NumPy's float32 (round half to even: np.rint), independent of torch's
    kernels."""
    values = x.numpy().astype(np.float32)
    multiplier = np.float32(params.multiplier.item())
    divisor = np.float32(params.divisor.item())
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.rint(values * multiplier)
        return np.clip(scaled, np.float32(params.low), np.float32(params.high)) / divisor


def same_bits(ours: torch.Tensor, expected: np.ndarray) -> bool:
    """Equal bit for bit (so -0.0 differs from 0.0), any NaN equal to any NaN."""
    got = ours.numpy().reshape(-1)
    expected = expected.reshape(-1)
    nan = np.isnan(got)
    if not np.array_equal(nan, np.isnan(expected)):
        return False
    return np.array_equal(got[~nan].view(np.int32), expected[~nan].view(np.int32))


@pytest.mark.parametrize(
    "params",
    [
        quant_params(torch.tensor(2.5), 8),
        quant_params(torch.tensor(2.5), 4, unsigned=True),
        quant_params(torch.tensor(0.37), 2, narrow_range=True),
        quant_params(torch.tensor(0.0), 8),  # amax zero: every value 0
        asymmetric_params(-0.8, 2.9, 3),
    ],
    ids=["int8", "uint4", "int2-narrow", "zero-amax", "asymmetric3"],
)
def test_the_compiled_pass_gives_the_formulas_values_bit_for_bit(params) -> None:  # noqa: ANN001
    x = hard_values(float(params.multiplier.item()) or 1.0)
    assert compiled.takes_fused(x)
    with torch.inference_mode():
        fused = compiled.fused_integer(
            x, params.multiplier, params.low, params.high, params.divisor
        )
        through_the_quantizer = apply_quantization(x, params)
    assert fused is not None, "the compiled pass did not run on this machine"
    expected = numpy_formula(x, params)
    assert same_bits(fused, expected)
    assert same_bits(through_the_quantizer, expected)


def test_a_compiler_that_fails_is_said_once_and_the_eager_steps_give_the_same_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> object:
        def kernel(*args: object) -> None:
            raise RuntimeError("InductorError: no working C++ compiler found")

        return kernel

    monkeypatch.setattr(compiled, "_kernel", {})
    monkeypatch.setattr(torch, "compile", broken)
    params = quant_params(torch.tensor(2.5), 6)
    x = hard_values(float(params.multiplier.item()))
    with torch.inference_mode():
        with pytest.warns(RuntimeWarning, match="no working C\\+\\+ compiler.*the same values"):
            first = apply_quantization(x, params)
        assert not compiled.takes_fused(x)  # never tried again
        second = apply_quantization(x, params)
    assert same_bits(first, numpy_formula(x, params))
    assert same_bits(second, numpy_formula(x, params))


def test_a_compile_that_fails_once_is_tried_again_and_its_reason_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A first compile that fails for a passing reason (a wrapper with no message of its own
    # around its cause), then compiles as torch.compile does: the second compile is used.
    compiles: list[int] = []
    real_compile = torch.compile

    def failing(*args: object) -> None:
        try:
            raise OSError("compile worker exited with signal 9")
        except OSError as cause:
            raise RuntimeError() from cause

    def flaky(function: object, **kwargs: object) -> object:
        compiles.append(1)
        return failing if len(compiles) == 1 else real_compile(function, **kwargs)

    def fused(x: torch.Tensor, params) -> torch.Tensor | None:  # noqa: ANN001
        with torch.inference_mode():
            return compiled.fused_integer(
                x, params.multiplier, params.low, params.high, params.divisor
            )

    monkeypatch.setattr(compiled, "_kernel", {})
    monkeypatch.setattr(torch, "compile", flaky)
    params = quant_params(torch.tensor(2.5), 6)
    x = hard_values(float(params.multiplier.item()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = fused(x, params)
    assert len(compiles) == 2 and compiled.compiled_enabled()
    assert second is not None and same_bits(second, numpy_formula(x, params))

    # Failing both times: the eager steps, and the warning names the cause beneath the wrapper.
    monkeypatch.setattr(compiled, "_kernel", {})
    monkeypatch.setattr(torch, "compile", lambda function, **kwargs: compiles.append(1) or failing)
    compiles.clear()
    with pytest.warns(RuntimeWarning, match="failed twice.*RuntimeError <- OSError: compile"):
        assert fused(x, params) is None
    assert len(compiles) == 2 and not compiled.compiled_enabled()


class Watching(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return func(*args, **(kwargs or {}))


def test_the_compiled_pass_stays_out_of_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    with torch.inference_mode():
        x = torch.zeros(SIZE)
        small = torch.zeros(compiled.FUSED_MIN_VALUES - 1)
        transposed = torch.zeros(SIZE, 2).t()
    assert compiled.takes_fused(x)
    assert not compiled.takes_fused(small)
    assert not compiled.takes_fused(transposed)  # not contiguous
    assert not compiled.takes_fused(torch.zeros(SIZE))  # not an inference tensor
    assert not compiled.takes_fused(torch.zeros(SIZE, requires_grad=True))
    with Watching():  # the tracer and the interceptor watch operations this way
        assert not compiled.takes_fused(x)
    monkeypatch.setenv(compiled.ENVIRONMENT_SWITCH, "0")
    assert not compiled.takes_fused(x)


def test_a_kernel_is_compiled_once_the_eager_steps_have_quantized_its_break_even(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unset, the switch compiles a kernel only after the eager steps have quantized
    BREAK_EVEN_VALUES of the values it would take in the process (counted per kernel); from
    then on, and wherever it is compiled already, the kernel takes every tensor it can."""
    monkeypatch.delenv(compiled.ENVIRONMENT_SWITCH)
    monkeypatch.setattr(compiled, "_eager_values", {})
    monkeypatch.setattr(compiled, "_kernel", {})
    monkeypatch.setattr(compiled, "BREAK_EVEN_VALUES", 3 * SIZE)
    with torch.inference_mode():
        x = torch.zeros(SIZE)
    taken = [compiled.takes_fused(x) for _ in range(5)]
    assert taken == [False, False, False, True, True]  # 3 x SIZE values quantized eagerly
    assert not compiled.takes_fused(x, kernel="mx")  # its own count
    assert not compiled.takes_fused(torch.zeros(SIZE), kernel="mx")  # ineligible: not counted
    assert compiled._eager_values == {"integer": 3 * SIZE, "mx": SIZE}
    monkeypatch.setitem(compiled._kernel, "nvfp4", object())  # compiled already: taken
    assert compiled.takes_fused(x, kernel="nvfp4")
    params = quant_params(torch.tensor(2.5), 6)
    values = hard_values(float(params.multiplier.item()))
    monkeypatch.setattr(compiled, "_eager_values", {})
    monkeypatch.setattr(compiled, "BREAK_EVEN_VALUES", values.numel())
    with torch.inference_mode():  # the eager steps, then the compiled pass: the same bits
        eager, fused = (apply_quantization(values, params) for _ in range(2))
    assert "integer" in compiled._kernel
    assert same_bits(eager, numpy_formula(values, params))
    assert same_bits(fused, numpy_formula(values, params))


@torch.inference_mode()
def hard_blocks(shape: tuple[int, ...], axis: int) -> torch.Tensor:
    """Random values of several magnitudes with, along `axis`, whole blocks of zeros (one
    holding -0.0), of float32 subnormals, of huge values, and blocks holding ±Inf or NaN."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=generator) * 3
    rows = x.movedim(axis, -1).reshape(-1, shape[axis])  # a copy: blocks run along its rows
    rows[0] = 0.0
    rows[0, 5] = -0.0
    rows[1] *= 1e-40
    rows[2] *= 1e30
    rows[3, 7], rows[4, 9], rows[5, 11] = float("inf"), float("-inf"), float("nan")
    rows[6, :4] = torch.tensor([1e-45, -1e-39, 2.0**-127, 448.0])
    rows[7] *= torch.logspace(-30, 30, shape[axis])
    moved = list(x.movedim(axis, -1).shape)
    return rows.reshape(moved).movedim(-1, axis).contiguous()


def bits_equal(ours: torch.Tensor, eager: torch.Tensor) -> bool:
    return same_bits(ours, eager.numpy())


def compiled_and_eager(run, monkeypatch: pytest.MonkeyPatch, spied: str):  # noqa: ANN001, ANN201
    """`run()` through the compiled pass (which must have run) and through the eager steps."""
    calls = []
    original = getattr(compiled, spied)

    def spy(*args: object) -> object:
        calls.append(args)
        return original(*args)

    with monkeypatch.context() as patch:
        patch.setattr(compiled, spied, spy)
        with torch.inference_mode():
            fused = run()
    assert calls, f"{spied} did not run"
    with monkeypatch.context() as patch:
        patch.setenv(compiled.ENVIRONMENT_SWITCH, "0")
        with torch.inference_mode():
            eager = run()
    return fused, eager


@pytest.mark.parametrize("element", ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8"])
@pytest.mark.parametrize("shape, axis", [((40, 64, 8, 8), 1), ((700, 200), -1)])
def test_mx_compiled_gives_the_eager_values_bit_for_bit(
    element: str, shape: tuple[int, ...], axis: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = hard_blocks(shape, axis)
    fused, eager = compiled_and_eager(
        lambda: mx_fake_quantize(x, ELEMENTS[element], 32, axis), monkeypatch, "fused_mx"
    )
    assert bits_equal(fused, eager)


@pytest.mark.parametrize("amax", [4.0, 0.0, 1e-3, 3e30])
def test_nvfp4_compiled_gives_the_eager_values_bit_for_bit(
    amax: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = hard_blocks((40, 64, 8, 8), 1)
    fused, eager = compiled_and_eager(
        lambda: nvfp4_fake_quantize(x, torch.tensor(amax), 16, 1), monkeypatch, "fused_nvfp4"
    )
    assert bits_equal(fused, eager)


@pytest.mark.parametrize("element", ["e4m3", "e5m2"])
@pytest.mark.parametrize("amax", [4.0, 0.0, 3e30])
def test_fp8_compiled_gives_the_eager_values_bit_for_bit(
    element: str, amax: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = hard_blocks((40, 64, 8, 8), 1)
    fused, eager = compiled_and_eager(
        lambda: fp8_fake_quantize(x, torch.tensor(amax), ELEMENTS[element]),
        monkeypatch,
        "fused_fp8",
    )
    assert bits_equal(fused, eager)


# -- the C kernel of the integer format (native/fake_quantize.c) ------------------------------


@pytest.fixture
def native_kernel(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The C kernel back in its place, its calls counted."""
    calls: list[int] = []

    def counted(*args: object) -> torch.Tensor | None:
        out = NATIVE_INTEGER(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(compiled, "native_integer", counted)
    return calls


@pytest.mark.parametrize(
    "params",
    [
        quant_params(torch.tensor(2.5), 8),
        quant_params(torch.tensor(2.5), 4, unsigned=True),
        quant_params(torch.tensor(0.37), 2, narrow_range=True),
        quant_params(torch.tensor(0.0), 8),
        asymmetric_params(-0.4, 1.7, 8),
    ],
    ids=["int8", "uint4", "int2 narrow", "amax 0", "asymmetric uint8"],
)
def test_the_c_kernel_gives_the_formulas_values_bit_for_bit(params, native_kernel) -> None:  # noqa: ANN001
    x = hard_values(float(params.multiplier.reshape(-1)[0].item()) or 1.0)
    with torch.inference_mode():
        out = apply_quantization(x, params)
    assert native_kernel == [True], "the C kernel did not run on this machine"
    assert same_bits(out, numpy_formula(x, params))


def test_the_c_kernel_per_channel_on_any_threads_gives_the_eager_values(
    native_kernel: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per output channel along axes 0 and 1 (amax 0 in one channel), split across two threads
    (from 2**17 values) and on one: the eager steps' values, bit for bit."""
    x = hard_values(40.0).reshape(-1)[: 12 * 5 * 4399].reshape(12, 5, 4399)
    threads = torch.get_num_threads()
    try:
        for axis, count in [(0, 2), (1, 2), (0, 1), (2, 2)]:
            torch.set_num_threads(count)
            amax = torch.rand(x.shape[axis], generator=torch.Generator().manual_seed(axis)) * 3
            amax[1] = 0.0
            params = quant_params(amax, 5, axis=axis)
            with torch.inference_mode():
                out = apply_quantization(x, params)
                with monkeypatch.context() as patch:
                    patch.setenv(compiled.ENVIRONMENT_SWITCH, "0")  # the eager steps
                    eager = apply_quantization(x, params)
            assert same_bits(out, eager.numpy())
    finally:
        torch.set_num_threads(threads)
    assert native_kernel == [True, False] * 4  # the kernel, then the eager steps (switched off)


def test_the_c_kernel_leaves_what_it_does_not_take_to_the_eager_steps(
    native_kernel: list[int],
) -> None:
    """Per tensor a transposed tensor is taken (its memory has no gaps: the kernel runs over
    it, the result in the same layout); a slice with gaps, a float64 tensor (quantized as
    float32), one a TorchFunctionMode or a TorchScript trace watches are not."""
    params = quant_params(torch.tensor(1.5), 6)
    x = hard_values(float(params.multiplier.item())).reshape(-1)[: 7 * 38000].view(7, 38000)
    with torch.inference_mode():
        transposed = apply_quantization(x.t(), params)
        assert transposed.stride() == x.t().stride()
        assert same_bits(transposed.t().contiguous(), numpy_formula(x, params))
        gaps = apply_quantization(x[:, ::3], params)
        assert same_bits(gaps.contiguous(), numpy_formula(x[:, ::3].contiguous(), params))
        apply_quantization(x.double(), params)
        with Watching():
            apply_quantization(x, params)
    with warnings.catch_warnings():  # a TorchScript trace: the kernel's result a constant there
        warnings.simplefilter("ignore", FutureWarning)
        traced = torch.jit.trace(lambda t: apply_quantization(t, params), x)
    # float64 is float32 again inside; the trace's run, not the kernel (its checking run may)
    assert native_kernel[:5] == [True, False, True, False, False]
    doubled = x * 2
    assert same_bits(traced(doubled), numpy_formula(doubled, params))
