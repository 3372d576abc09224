"""Fake quantization of CPU tensors by the C kernels of native/fake_quantize.c, one pass each,
with the eager steps' values bit for bit.

Eager, the integer format walks a tensor four times (multiply, round, clamp, divide) and a block
format some fifteen times (its blocks' amax, their scales, the element cast's seven steps, the
scale back), each step a call of some microseconds however small the tensor. A kernel here makes
one pass: the integer format and scaled FP8 per tensor or per channel, and the MX formats, NVFP4
and group-wise INT with a block's amax, its scale and its elements computed while the block is in
cache, blocks along any axis. No compile in the process, and every size gains (the first time a
machine runs one, the C compiler builds the library, some 25 s; native/). Every kernel clamps
its input to `bounds` first where it is given (an activation taken over: quantization/
elision.py), in the same pass.

Each function returns None where its kernel does not take the tensor: not a float32 CPU tensor
(the formats pass float32 copies), not contiguous (or, per tensor, dense in another order),
something watching the operations (`native.unwatched`), the kernels switched off
(`MODEL_EXPLORER_COMPILE=0`) or not built (no C compiler: one warning). The caller then takes its
eager steps: the same values, slower.
tests/formats/test_kernels.py checks the values, bit for bit, on rounding midpoints, signed zeros,
±Inf, NaN, subnormals and all-zero, overflowing and partial blocks, on one thread and on two.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import torch
from torch import Tensor

from model_explorer import native
from model_explorer.formats.element_types import Element

# From this many values on a tensor is split across torch's threads.
THREADED_VALUES = 1 << 17

# Below this many values the integer format is left to its four eager steps, which ATen runs
# on every core: inside the digits CNN's candidates they were 0.83 ms of 8.8 ahead of the
# kernel on one thread (p 0.013, 20 candidates paired; ResNet-20 the same within 1 ms), where
# the kernel alone is ahead on each such tensor (benchmarks/bench_kernel_choices.py,
# docs/performance-kernels.md). The block formats' kernels, whose eager steps are some fifteen, take
# every size.
INTEGER_SMALLEST = THREADED_VALUES

# Below this many values a slice with gaps is left to the eager steps: the checks of its layout
# cost more than they save (7,680 values: 9.9 us against 8.5 us eager; 130,560: 23.8 against
# 44.3; measured at one thread, benchmarks/bench_formats.py's machine).
ROWS_SMALLEST = 1 << 15

# The block formats' kernels by their kind (fake_quantize_<kind> in the C source).
BLOCK_KINDS = ("mx", "nvfp4", "group_fp16", "group_float32")

# FP16, in which group-wise INT stores its scales: rounded as an element type.
FP16 = Element("fp16", 16, 5, 10, 65504.0, 15)

# The input's bounds where a kernel takes none (Bounds below): every value as it is.
UNBOUNDED = (-math.inf, math.inf)
# A kernel's input bounds: (floor, ceiling), which it clamps its values to first, as an
# activation before it would (quantization/elision.py); None or UNBOUNDED for none.
Bounds = tuple[float, float] | None

_POINTER, _SIZE, _FLOAT = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
_BOUNDS = [_FLOAT, _FLOAT]  # every kernel's last two arguments: the input's floor and ceiling
_INTEGER = [_POINTER, _POINTER, *[_SIZE] * 4, _POINTER, _POINTER, _FLOAT, _FLOAT, *_BOUNDS]
_SCALED = [_POINTER, _POINTER, *[_SIZE] * 4, _POINTER, _POINTER, _POINTER, *_BOUNDS]
_SIGNATURES = {
    "integer": _INTEGER,
    "scaled": _SCALED,
    "integer_rows": _INTEGER,
    "scaled_rows": _SCALED,
    **{
        kind: [_POINTER, _POINTER, *[_SIZE] * 5, *[_POINTER] * 3, _FLOAT, _FLOAT, *_BOUNDS]
        for kind in BLOCK_KINDS
    },
}

# The C functions, set up once, by kind; None where the library could not be built.
_functions: dict[str, Any] = {}
# Each element type's numbers as the kernels read them, by name.
_element_numbers: dict[str, Any] = {}
# A block kernel's parameters (its format's numbers) as it reads them, by their values.
_parameters: dict[tuple[float, ...], Any] = {}


def _function(kind: str) -> Any:
    if kind not in _functions:
        _functions[kind] = native.function(
            "fake_quantize",
            f"fake_quantize_{kind}",
            _SIGNATURES[kind],
            "fake-quantization kernel",
            "tensors are quantized by the eager steps",
        )
    return _functions[kind]


def takes(x: Tensor) -> bool:
    """Whether the kernels may take `x`: a plain float32 CPU tensor, the kernels on, nothing
    watching the operations."""
    return (
        type(x) is Tensor
        and x.dtype == torch.float32
        and x.is_cpu
        and native.enabled()
        and native.unwatched(x)
    )


def element_numbers(element: Element) -> Any:
    """The numbers the kernels read for an element type (see the C source): its largest value,
    2**min_exponent, 2**-mantissa_bits, and an integer element's step and inverse."""
    numbers = _element_numbers.get(element.name)
    if numbers is None:
        step = element.smallest_subnormal if element.exponent_bits == 0 else 0.0
        values = (
            element.max_normal,
            2.0**element.min_exponent,
            2.0**-element.mantissa_bits,
            step,
            1.0 / step if step else 0.0,
        )
        numbers = _element_numbers[element.name] = (ctypes.c_float * 5)(*values)
    return numbers


def _run(function: Any, n: int, rows: int, head: tuple, tail: tuple) -> None:
    """`function(*head, start, end, *tail)` over [0, rows) of a tensor of `n` values: one call
    below THREADED_VALUES, else split across torch's threads. Every address in `head` and
    `tail` points into a tensor or an array the caller holds until this returns."""
    if n < THREADED_VALUES or rows < 2:
        function(*head, 0, rows, *tail)
        return
    smallest = max(1, (THREADED_VALUES // 2) // max(n // rows, 1))
    calls = [(*head, start, end, *tail) for start, end in native.ranges(rows, smallest)]
    native.in_threads(function, calls, "fake-quantization kernel")


def native_integer(
    x: Tensor,
    multiplier: Tensor,
    low: int,
    high: int,
    divisor: Tensor,
    axis: int | None,
    bounds: Bounds = None,
    overwrite: bool = False,
) -> Tensor | None:
    """`(x * multiplier).round().clamp(low, high).div(divisor)`, multiplier and divisor per
    tensor, or per channel along `axis`; the result in the strides of `x`, as the eager steps';
    `x` clamped to `bounds` first. `overwrite`: the result written over `x` (where nothing
    reads `x` after: quantization/elision.py), which the kernel does where it lays the result
    out as `x` (not for rows with gaps). None below INTEGER_SMALLEST values."""
    tail = (float(low), float(high), *(bounds or UNBOUNDED))
    return _elementwise("integer", x, multiplier, divisor, axis, tail, overwrite, INTEGER_SMALLEST)


def native_scaled(
    x: Tensor,
    scale: Tensor,
    inverse: Tensor,
    element: Element,
    axis: int | None,
    bounds: Bounds = None,
) -> Tensor | None:
    """Scaled FP8's `cast_element(x * scale, element) * inverse`, per tensor or per channel,
    `x` clamped to `bounds` first."""
    numbers = ctypes.addressof(element_numbers(element))
    return _elementwise("scaled", x, scale, inverse, axis, (numbers, *(bounds or UNBOUNDED)))


def _elementwise(
    kind: str,
    x: Tensor,
    first: Tensor,
    second: Tensor,
    axis: int | None,
    tail: tuple,
    overwrite: bool = False,
    smallest: int = 0,
) -> Tensor | None:
    """`kind`'s kernel over `x` with `first` and `second` per tensor (axis None) or per channel,
    `tail` its last arguments: in the memory of a contiguous or, per tensor, dense `x`, the
    result in its strides; per tensor, a slice of the last axis in any order of the dimensions
    as rows with gaps (`_rows_with_gaps`: an attention's query, its keys transposed), the
    result dense in the order of `x`'s memory, as the eager steps' results are. None below
    `smallest` values."""
    if not takes(x) or x.numel() < smallest:  # a trace's numel() is no int: takes() first
        return None
    rows = order = None
    if not (x.is_contiguous() or (axis is None and _dense(x))):
        if axis is not None or x.numel() < ROWS_SMALLEST:
            return None
        order = _memory_order(x)
        shape, strides = x.shape, x.stride()
        rows = _rows_with_gaps([(shape[d], strides[d]) for d in order])
        if rows is None:
            return None
    channels = 1 if axis is None else x.shape[axis]
    numbers = (_as_float32(first, channels), _as_float32(second, channels))
    function = _function(kind if rows is None else f"{kind}_rows")
    if function is None or numbers[0] is None or numbers[1] is None:
        return None
    if overwrite and order is None:
        out = x
    elif order is None:
        out = torch.empty_like(x)
        if out.stride() != x.stride():  # the eager steps' result has x's strides
            return None
    else:
        out = torch.empty_strided(x.shape, _dense_strides(x.shape, order))
    n, head = x.numel(), (x.data_ptr(), out.data_ptr())
    pointers = (numbers[0].data_ptr(), numbers[1].data_ptr(), *tail)
    if rows is None:
        inner = 1 if axis is None else math.prod(x.shape[axis + 1 :])
        _run(function, n, n, head, (channels, inner, *pointers))
        return out
    count, length, stride = rows
    _run(function, n, count, head, (length, stride, *pointers))
    return out


def _dense_strides(shape: torch.Size, order: list[int]) -> list[int]:
    """The strides of a tensor of `shape` laid out dense with its dimensions in `order` (from
    the outermost)."""
    strides, step = [0] * len(shape), 1
    for dimension in reversed(order):
        strides[dimension] = step
        step *= shape[dimension]
    return strides


def _memory_order(x: Tensor) -> list[int]:
    """`x`'s dimensions from the outermost in memory to the innermost, as an element-wise
    operation of torch orders them for its result (TensorIterator's `reorder_dimensions`, an
    insertion sort by stride: a tie puts the larger dimension outside, a stride of 0 decides
    nothing)."""
    strides, shape = x.stride(), x.shape
    order = list(range(x.dim() - 1, -1, -1))  # innermost first while sorting
    for i in range(1, len(order)):
        moving = i
        for j in range(i - 1, -1, -1):
            a, b = order[j], order[moving]
            if strides[a] == 0 or strides[b] == 0:
                continue
            if strides[a] < strides[b]:
                break
            if strides[a] > strides[b] or shape[a] > shape[b]:
                order[j], order[moving] = b, a
                moving = j
    return order[::-1]


def _rows_with_gaps(layout: list[tuple[int, int]]) -> tuple[int, int, int] | None:
    """(rows, length, stride) where a tensor of this layout ((size, stride) of each dimension,
    from the outermost in memory) is rows of `length` contiguous values (its innermost
    dimensions that lie contiguous, merged), one `stride` apart in that order (a slice of a
    contiguous tensor's last axis, by heads or not): the eager steps' result is then dense in
    that order. None otherwise."""
    sizes = [(n, s) for n, s in layout if n != 1]
    length = 1
    while sizes and sizes[-1][1] == length:
        length *= sizes.pop()[0]
    if length == 1 or not sizes or sizes[-1][1] < length:
        return None
    for (_, stride), (size, inner) in zip(sizes[:-1], sizes[1:], strict=True):
        if stride != inner * size:  # the leading dimensions do not merge into rows
            return None
    count = math.prod(n for n, _ in sizes)
    return count, length, sizes[-1][1]


def native_blocks(
    kind: str,
    x: Tensor,
    block_size: int,
    axis: int,
    numbers: tuple[float, ...],
    element: Element | None = None,
    scale_element: Element | None = None,
    integers: tuple[float, float] = (0.0, 0.0),
    bounds: Bounds = None,
) -> Tensor | None:
    """A block format (`kind`, one of BLOCK_KINDS) on `x` with blocks of `block_size` values
    along `axis` (an axis no longer than a block is one block; a last partial block holds what
    is left, as blocks.py pads it with zeros); `numbers` are its kernel's (MX: emax; NVFP4: the
    tensor scale, its reciprocal and 1 where the tensor's amax is usable; group-wise INT: the
    largest integer), `integers` the integers' bounds (group-wise INT), `bounds` the input's.
    The result is contiguous, as the eager steps' is; `x` is made so first."""
    if not takes(x) or x.dim() == 0 or x.numel() == 0:
        return None
    function = _function(kind)
    if function is None:
        return None
    if not x.is_contiguous():
        x = x.contiguous()
    axis %= x.dim()
    length, inner = x.shape[axis], math.prod(x.shape[axis + 1 :])
    block = max(min(block_size, length), 1)
    rows = x.numel() // (length * inner) * -(-length // block)
    out = torch.empty_like(x)
    parameters = _parameters.get(numbers)  # p0 .. p2 of the C source's format
    if parameters is None:
        if len(_parameters) >= 4096:
            _parameters.clear()
        parameters = _parameters[numbers] = (ctypes.c_float * 3)(*numbers)
    elements = [
        ctypes.addressof(element_numbers(chosen)) if chosen is not None else None
        for chosen in (scale_element, element)
    ]
    tail = (length, block, inner, ctypes.addressof(parameters), *elements, *integers)
    tail += bounds or UNBOUNDED
    _run(function, x.numel(), rows, (x.data_ptr(), out.data_ptr()), tail)
    return out


def _as_float32(values: Tensor, count: int) -> Tensor | None:
    """`values` as `count` contiguous float32 numbers on the CPU (a copy only where they are
    not), or None where they are not `count` numbers."""
    if values.numel() != count or not values.is_cpu:
        return None
    if values.dtype == torch.float32 and values.is_contiguous():
        return values
    return values.detach().float().contiguous()


def _dense(x: Tensor) -> bool:
    """Whether `x` covers its memory without gaps or overlaps in some order of its dimensions
    (a transposed or permuted tensor): per tensor, the kernel then runs over that memory."""
    expected = 1
    for stride, size in sorted((s, n) for s, n in zip(x.stride(), x.shape, strict=True) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True
