"""The compiled passes of the fake quantization (formats/compiled.py), bit for bit: the integer
format against NumPy's float32 arithmetic of its formula, MX, NVFP4 and FP8 against their
eager steps (which tests/formats/test_numerics.py checks against the peers); and the way back
to the eager steps."""

from __future__ import annotations

import warnings

import pytest
import torch
from format_values import (
    SIZE,
    Watching,
    bits_equal,
    hard_blocks,
    hard_values,
    numpy_formula,
    same_bits,
)

from model_explorer.formats import compiled, kernels
from model_explorer.formats.blocks import fp8_fake_quantize, mx_fake_quantize, nvfp4_fake_quantize
from model_explorer.formats.elements import ELEMENTS
from model_explorer.formats.integer import (
    apply_quantization,
    asymmetric_params,
    quant_params,
)


@pytest.fixture(autouse=True)
def compiled_from_the_first_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The passes from the first tensor past their thresholds, not once they pay, here; the
    C kernels, which every format takes first, out of the way (test_kernels.py tests them)."""
    monkeypatch.setenv(compiled.ENVIRONMENT_SWITCH, "1")
    for name in ("native_integer", "native_scaled", "native_blocks"):
        monkeypatch.setattr(kernels, name, lambda *args, **kwargs: None)


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
