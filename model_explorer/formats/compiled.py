"""Fake quantization of CPU tensors as one compiled pass per tensor, with the eager steps' values.

Eager, the integer format walks a tensor four times (multiply, round, clamp, divide) and a
block format some fifteen times (its blocks' amax, their scales, the element cast's seven
steps, the scale back). `torch.compile` (Inductor's C++ and OpenMP code) makes the same
operations, in the same order and in float32, one kernel: a block's amax, its scale and its
elements in one pass. The values are the same, bit for bit. tests/formats/test_compiled.py
checks NaN, ±Inf, -0.0, subnormals, all-zero and overflowing blocks and the rounding
midpoints, against NumPy for the integer format and against the eager functions (which the
peer-oracle tests check) for the others.

What it is used for, and what it saves (2 cores):
- the integer format per tensor, from 2**18 values: 0.60 against 1.02 ms on 4 M values, 3.8
  against 9.2 ms on 16 M; below that the four eager steps are as fast;
- MX (every element type), NVFP4 and FP8 per tensor, from 2**17 values (blocks.py's
  threshold): on 8x128x28x28 MXFP4 0.35 against 0.75 ms, NVFP4 0.36 against 0.64 ms, FP8
  0.21 against 0.38 ms. Smaller tensors gain too (MXFP4 on 120x64: 47 against 104 us), but a
  small model's many shapes (a block count or a length of 1) each cost a compile, and FP8's
  scale costs its own steps there.
Group-wise INT keeps its eager steps: compiled, it was no faster and its FP16 scale rounded
differently.

Each kernel is compiled once per process, once it pays: compiling costs seconds (about two
with Inductor's cache warm, some ten cold, and the first in a process some four more for
dynamo itself), and the pass saves some 0.1 to 0.5 ns per value. So the eager steps quantize
the first BREAK_EVEN_VALUES values a kernel would take in the process, and the kernel is
compiled after: an EfficientNet-Lite0 candidate offers 850 M values (compiled from its
twenty-first candidate on), a ResNet-20 candidate 75 M and a MiniLM candidate 42 M (compiled,
if ever, after some 230 and 400 candidates), the digits models none but when the front is
scored on its held-out data (never compiled: the default workload's search took some 2.5 s of
19 longer with it). One graph serves every bit width, element type and size
(bounds and lengths are symbols, an element type's numbers are an input), with a second where
a block's trailing length is 1, so a search compiles at most a few times. The compiled pass takes
inference tensors (made under torch.inference_mode, as a search's scoring makes them; a graph
is kept per kind of tensor), so never one that needs a gradient, and runs where nothing else
watches the operations: not under a TorchFunctionMode or a dispatch mode (the tracer, the
interceptor), not while torch.compile or export traces, not on CUDA (ATen's fused kernels
there).

Every format takes a C kernel first (formats/kernels.py: one pass, the same values, no compile
in the process, every size); the compiled passes here serve where those kernels cannot be built
(a C compiler Inductor can drive but the kernels' build cannot use).
Where compiling fails (no C++ compiler, a platform Inductor does
not support), one warning says so and the eager steps run from then on: the same values,
slower.
`MODEL_EXPLORER_COMPILE=0` in the environment turns the compiled passes off, and
`MODEL_EXPLORER_COMPILE=1` takes them from the first tensor past a threshold (the benchmarks
measure them so).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import torch
from torch import Tensor

from model_explorer import native
from model_explorer.formats.element_types import ELEMENTS
from model_explorer.native import ENVIRONMENT_SWITCH

# From this many values on the compiled pass is faster than the four eager steps (2 cores).
FUSED_MIN_VALUES = 2**18

# The values after which compiling a kernel has paid for itself: some four seconds of
# compiling at 0.25 ns saved per value.
BREAK_EVEN_VALUES = 2**34

# The compiled kernels by name, and "failed" once compiling one failed (then none is tried).
_kernel: dict[str, Any] = {}
# The values each kernel would have taken so far that the eager steps quantized, by its name.
_eager_values: dict[str, int] = {}
# Each element type's numbers as the kernels read them, by the element's name.
_element_numbers: dict[str, Tensor] = {}


def _integer(x: Tensor, multiplier: Tensor, low: int, high: int, divisor: Tensor) -> Tensor:
    rounded = (x * multiplier).round()
    # The clamp as ATen's eager kernel computes it: NaN passes, and so does -0.0 at a bound of
    # 0 (Inductor's clamp makes it +0.0).
    clamped = torch.where(rounded < low, low, torch.where(rounded > high, high, rounded))
    return clamped.div(divisor)


def compiled_enabled() -> bool:
    """False where the environment turned the compiled pass off or compiling it failed."""
    return os.environ.get(ENVIRONMENT_SWITCH, "1") != "0" and "failed" not in _kernel


def takes_fused(x: Tensor, minimum: int = FUSED_MIN_VALUES, kernel: str = "integer") -> bool:
    """Whether `x` (float32, on the CPU) goes through the compiled pass `kernel`: an inference
    tensor (made under torch.inference_mode, as a search's scoring makes its activations), so
    that one graph serves (a graph is kept per kind of tensor), and never one that needs a
    gradient; and the kernel pays (`pays`)."""
    return (
        x.numel() >= minimum
        and x.device.type == "cpu"
        and x.is_inference()
        and x.is_contiguous()
        and compiled_enabled()
        and native.unwatched()
        and pays(kernel, x.numel())
    )


def pays(kernel: str, values: int) -> bool:
    """Whether `kernel` takes a tensor of `values` values: where it is compiled already, or
    where the eager steps have quantized BREAK_EVEN_VALUES of the values it would have taken
    (those counted here); from the first with `MODEL_EXPLORER_COMPILE=1`."""
    if kernel in _kernel or os.environ.get(ENVIRONMENT_SWITCH) == "1":
        return True
    seen = _eager_values.get(kernel, 0)
    if seen >= BREAK_EVEN_VALUES:
        return True
    _eager_values[kernel] = seen + values
    return False


def fused_integer(
    x: Tensor, multiplier: Tensor, low: int, high: int, divisor: Tensor
) -> Tensor | None:
    """`(x * multiplier).round().clamp(low, high).div(divisor)` for a contiguous float32 `x`
    and per-tensor `multiplier` and `divisor` (one value each), in one compiled pass; None
    where compiling failed (then said once, and never tried again)."""
    flat = _run(
        "integer", _integer, x.view(-1), multiplier.reshape(()), low, high, divisor.reshape(())
    )
    return None if flat is None else flat.view(x.shape)


def _run(name: str, function: Any, *args: Any) -> Tensor | None:
    """`function(*args)` compiled (once per process), or None where compiling failed twice
    (a fresh compile is tried once more: a compiler can fail for a passing reason, such as a
    worker it spawned being killed): said once, and never tried again."""
    for attempt in (1, 2):
        kernel = _kernel.get(name)
        if kernel is None:
            kernel = _kernel[name] = torch.compile(function, dynamic=True, fullgraph=True)
        try:
            return kernel(*args)
        except Exception as error:  # noqa: BLE001 - any failure of the compiler: the eager steps
            del _kernel[name]
            if attempt == 1:
                continue
            _kernel["failed"] = True
            warnings.warn(
                f"compiling a fused fake-quantization kernel failed twice ({_reasons(error)}); "
                f"tensors are quantized by the eager steps instead: the same values, slower "
                f"(set {ENVIRONMENT_SWITCH}=0 to skip the attempt)",
                RuntimeWarning,
                stacklevel=4,
            )
    return None


def _reasons(error: BaseException) -> str:
    """The first line of `error` and of each error it was raised from, by type: a compiler's
    wrapper often carries no message of its own."""
    reasons = []
    seen: BaseException | None = error
    while seen is not None and len(reasons) < 4:
        text = str(seen).strip()
        reasons.append(
            f"{type(seen).__name__}: {text.splitlines()[0]}" if text else type(seen).__name__
        )
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(reasons)


# -- block formats: the block's scale and its elements in one compiled pass ------------------
_FLOAT32_EXPONENT_MASK = 0x7F800000  # as in elements.py, whose arithmetic this repeats
_E2M1_MAX = ELEMENTS["e2m1"].max_normal


def biased_exponent(amax: Tensor) -> Tensor:
    """The float32 exponent field of `amax` (non-negative; int32 in [0, 255]): floor(log2(amax))
    + 127 for a normal amax, exact where a log2 and a floor would round near powers of two, and
    five times faster than torch.frexp; 0 for zero and subnormals, 255 for Inf and NaN. Eager
    and compiled passes alike read a block's shared exponent from it."""
    return (amax.view(torch.int32) >> 23) & 0xFF


def _power_of_two(exponent: Tensor) -> Tensor:
    """2.0**exponent (int32 in [-127, 127]) from its float32 bits, 2**-127 (subnormal) too."""
    bits = torch.where(exponent > -127, (exponent + 127) << 23, 1 << 22)
    return bits.view(torch.float32)


def _round_to_element(values: Tensor, element: Tensor) -> Tensor:
    """elements.cast_element's arithmetic: `element` holds max_normal, 2**min_exponent and
    2**-mantissa_bits, so that one graph serves every element type."""
    values = values.clamp(-element[0], element[0])
    binade = (values.view(torch.int32) & _FLOAT32_EXPONENT_MASK).view(torch.float32)
    step = binade.clamp(min=element[1]) * element[2]
    return (values / step).round() * step


def _mx(blocks: Tensor, element: Tensor, emax: int) -> Tensor:
    """blocks.mx_fake_quantize's arithmetic on blocks (outer, blocks, block_size, inner); the
    shared exponent from the block amax's exponent bits (a subnormal or zero amax clamps to
    E8M0's smallest scale there and here alike)."""
    amax = blocks.abs().amax(dim=2, keepdim=True)
    biased = biased_exponent(amax)
    shared = (biased - (127 + emax)).clamp(-127, 127)
    finite = biased < 255
    scale = torch.where(finite, _power_of_two(shared), float("nan"))
    inverse = torch.where(finite, _power_of_two(-shared), float("nan"))
    return _round_to_element(blocks * inverse, element) * scale


def element_constants(element: Any) -> Tensor:
    """The element's numbers `_round_to_element` reads, as a tensor (the graph's input)."""
    numbers = _element_numbers.get(element.name)
    if numbers is None:
        numbers = _element_numbers[element.name] = torch.tensor(
            [element.max_normal, 2.0**element.min_exponent, 2.0**-element.mantissa_bits]
        )
    return numbers


def fused_mx(blocks: Tensor, dim: int, element: Any) -> Tensor | None:
    """mx_fake_quantize's values for `blocks` (split_blocks' output, blocks along `dim`) in one
    compiled pass; None where compiling failed."""
    shape = blocks.shape
    four = blocks.reshape(math.prod(shape[: dim - 1]), shape[dim - 1], shape[dim], -1)
    out = _run("mx", _mx, four, element_constants(element), element.emax)
    return None if out is None else out.view(shape)


def _nvfp4(
    blocks: Tensor,
    tensor_scale: Tensor,
    reciprocal: Tensor,
    amax_usable: Tensor,
    e4m3: Tensor,
    e2m1: Tensor,
) -> Tensor:
    """blocks.nvfp4_fake_quantize's arithmetic on blocks (outer, blocks, 16, inner); the
    per-tensor scale, its reciprocal and whether the amax is usable computed outside."""
    amax = blocks.abs().amax(dim=2, keepdim=True)
    block_scale = _round_to_element(amax / _E2M1_MAX / tensor_scale, e4m3)
    usable = (block_scale != 0) & amax_usable
    inverse = torch.where(usable, reciprocal / block_scale, 1.0)
    back = torch.where(usable, tensor_scale * block_scale, 0.0)
    return _round_to_element(blocks * inverse, e2m1) * back


def fused_nvfp4(
    blocks: Tensor, dim: int, tensor_scale: Tensor, amax_usable: Tensor
) -> Tensor | None:
    """nvfp4_fake_quantize's values for `blocks` in one compiled pass; None where compiling
    failed."""
    shape = blocks.shape
    four = blocks.reshape(math.prod(shape[: dim - 1]), shape[dim - 1], shape[dim], -1)
    e4m3, e2m1 = element_constants(ELEMENTS["e4m3"]), element_constants(ELEMENTS["e2m1"])
    arguments = (four, tensor_scale, 1.0 / tensor_scale, amax_usable, e4m3, e2m1)
    out = _run("nvfp4", _nvfp4, *arguments)
    return None if out is None else out.view(shape)


def _scaled(values: Tensor, scale: Tensor, inverse: Tensor, element: Tensor) -> Tensor:
    return _round_to_element(values * scale, element) * inverse


def fused_fp8(values: Tensor, scale: Tensor, inverse: Tensor, element: Any) -> Tensor | None:
    """fp8_fake_quantize's values for a per-tensor scale (and its inverse) in one compiled
    pass; None where compiling failed."""
    constants = element_constants(element)
    out = _run("fp8", _scaled, values.view(-1), scale.reshape(()), inverse.reshape(()), constants)
    return None if out is None else out.view(values.shape)
