"""Fake quantization to scaled FP8, OCP MX, NVFP4 and group-wise integers, as pure tensor functions.

Every function takes a tensor of any rank in float32, float16 or bfloat16 on any device, computes
in float32 with torch operations only (so CUDA runs what the CPU runs), and returns the input's
dtype. Blocks are views of the input where its length allows (`layout.split_blocks`), so no loop
runs over blocks and, along any axis, no copy is made but for padding; the scaled copy of the
input is rounded in place (`cast_element_`). Where the input needs a
gradient it passes straight through, unchanged (`layout.straight_through`), so that retraining
works; inside the rounding no graph is recorded.

On the CPU each function takes one pass of a C kernel first (formats/kernels.py: the block's
amax, its scale and its elements while the block is in cache), which gives these steps' values
bit for bit; the steps below run where it does not take the tensor (CUDA, a tensor something
watches, no C compiler, MODEL_EXPLORER_COMPILE=0).

Where a block or group holds NaN its values all come back NaN: no scale exists for it. ±Inf
differs by format and is said in each docstring: what a scale that cannot hold it does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from model_explorer.formats import kernels
from model_explorer.formats.elements import (
    ELEMENTS,
    Element,
    cast_element,
    cast_element_,
)
from model_explorer.formats.integer import channel_view
from model_explorer.formats.kernels import Bounds
from model_explorer.formats.layout import (
    ZERO_AMAX,
    biased_exponent,
    block_amax,
    exact_power_of_two,
    float32,
    merge_blocks,
    split_blocks,
    straight_through,
)

E4M3 = ELEMENTS["e4m3"]
E2M1 = ELEMENTS["e2m1"]
# E8M0, MX's scale: 2**k for k in [-127, 127]; its one other code (255) is NaN, it has no 0 or Inf.
E8M0_MIN_EXPONENT, E8M0_MAX_EXPONENT = -127, 127
# NVFP4's per-tensor scale maps the tensor's amax to the largest E2M1 value times the largest
# E4M3 block scale.
NVFP4_TENSOR_RANGE = E2M1.max_normal * E4M3.max_normal

# The numbers a kernel reads for a per-tensor amax, by its value and the format: they are the
# steps' own (computed by them once), where the steps would take some ten operations on a
# one-number tensor per call (10-25 us of a quantizer call of 20-50 us on a digits CNN's
# activations). Cleared when full.
_PER_TENSOR: dict[tuple, tuple] = {}
_PER_TENSOR_LIMIT = 4096


def _per_tensor(key: tuple, compute) -> tuple:  # noqa: ANN001 - a callable of no arguments
    numbers = _PER_TENSOR.get(key)
    if numbers is None:
        if len(_PER_TENSOR) >= _PER_TENSOR_LIMIT:
            _PER_TENSOR.clear()
        numbers = _PER_TENSOR[key] = compute()
    return numbers


def _fp8_scales(amax: Tensor, element: Element) -> tuple[Tensor, Tensor]:
    """Scaled FP8's scale and inverse for `amax` (the steps of fp8_fake_quantize)."""
    zero = amax <= ZERO_AMAX
    scale = element.max_normal / torch.where(zero, 1.0, amax)
    return scale, torch.where(zero, 0.0, 1.0 / scale)


def fp8_fake_quantize(
    x: Tensor, amax: Tensor, element: Element, axis: int | None = None, bounds: Bounds = None
) -> Tensor:
    """Scaled FP8 as NVIDIA modelopt does it: x * (element.max_normal / amax) cast to the element,
    scaled back; amax of shape () per tensor or (channels,) along `axis`; amax 0 (or below
    2**-24) -> that slice quantizes to 0.

    The scale back multiplies by `1 / scale`, as modelopt does, not by `amax / max_normal`
    (they differ by a rounding). Two differences from modelopt: where amax is zero, modelopt
    quantizes with amax 1 (its output is not zero), while here the slice is zero, the rule of
    the integer quantizer and of modelopt's own integer path; and modelopt fake-quantizes only
    E4M3 so, where any element is allowed here. Values beyond amax, ±Inf among them, saturate to
    ±amax (in the element's rounding); NaN stays NaN. `bounds` (every function here): `x`
    clamped to (floor, ceiling) first, inside the kernel's pass where one takes it.
    """
    values = float32(x)
    if axis is None and amax.numel() == 1 and kernels.takes(values):  # a CPU tensor's: kept
        key = ("fp8", float(amax), element.name)  # the value of any float dtype, exactly
        scale, inverse = _per_tensor(
            key, lambda: _fp8_scales(amax.detach().float().reshape(()).cpu(), element)
        )
    else:
        amax = channel_view(amax.detach().float().to(values.device), values.dim(), axis)
        scale, inverse = _fp8_scales(amax, element)
    axis = None if axis is None else axis % max(values.dim(), 1)
    native = kernels.native_scaled(values, scale, inverse, element, axis, bounds)
    if native is not None:
        return straight_through(x, native)
    values = _bounded(values, bounds)
    return straight_through(x, cast_element_(values * scale, element).mul_(inverse))


def _bounded(values: Tensor, bounds: Bounds) -> Tensor:
    """`values` clamped to `bounds` for the eager steps (as the kernels clamp them)."""
    return values if bounds is None else values.clamp(*bounds)


def mx_fake_quantize(
    x: Tensor, element: Element, block_size: int = 32, axis: int = -1, bounds: Bounds = None
) -> Tensor:
    """OCP Microscaling v1.0: blocks of `block_size` consecutive values along `axis` (a last partial
    block padded with zeros, which do not change its max), one shared power-of-two scale per block,
    X = 2**(floor(log2(block amax)) - element.emax), clamped to E8M0's range, elements
    cast_element(x / X) * X. All-zero block -> zeros; a block holding NaN -> NaN (spec: scale NaN).

    A block holding ±Inf (and no NaN) comes back all NaN too: floor(log2(Inf)) has no E8M0
    code but NaN's, as in Microsoft's MX reference implementation (by the spec's authors), which
    sets a shared exponent above E8M0's range to NaN (torchao keeps the Inf and flushes the rest).
    The lower clamp gives tiny blocks X = 2**-127, E8M0's smallest, exactly. torchao's emulation
    differs there, for blocks whose amax is below 2**(element.emax - 126): it divides by 2**-126
    (keeping its float32 scale normal) but multiplies back by the stored code's 2**-127, which
    halves such blocks.
    """
    values = float32(x)
    native = kernels.native_blocks(
        "mx", values, block_size, axis, (element.emax,), element, bounds=bounds
    )
    if native is not None:
        return straight_through(x, native)
    values = _bounded(values, bounds)
    blocks, dim = split_blocks(values, block_size, axis)
    amax = block_amax(blocks, dim)
    # A zero or subnormal amax reads an exponent of -127 and clamps to E8M0's smallest scale,
    # as its exact exponent would.
    shared = biased_exponent(amax).sub_(127 + element.emax)
    shared.clamp_(E8M0_MIN_EXPONENT, E8M0_MAX_EXPONENT)
    no_scale = ~torch.isfinite(amax)
    scale = exact_power_of_two(shared).masked_fill_(no_scale, float("nan"))
    inverse = exact_power_of_two(shared.neg_()).masked_fill_(no_scale, float("nan"))
    quantized = cast_element_(blocks * inverse, element).mul_(scale)
    return straight_through(x, merge_blocks(quantized, values.shape, axis))


def nvfp4_fake_quantize(
    x: Tensor, amax: Tensor, block_size: int = 16, axis: int = -1, bounds: Bounds = None
) -> Tensor:
    """NVFP4: E2M1 elements in blocks of 16 along `axis`; each block's scale block_amax / 6,
    divided by the per-tensor scale amax / (6 * 448), stored as FP8 E4M3; the per-tensor `amax`
    (shape ()) is given (calibrated for activations, max|w| for weights).

    The arithmetic is torchao's `nvfp4_quantize` (which follows NVIDIA's kernels), operation for
    operation: s = e4m3((block_amax / 6) / t) with t = amax / 2688, elements
    e2m1(x * ((1 / t) / s)), values back as element * (t * s). torchao's single-level variant
    (no per-tensor scale) is amax = 2688, where t is exactly 1.

    The block scale is any E4M3 value, subnormals included, saturated at 448 (a block beyond the
    calibrated amax saturates; ±Inf saturates to about ±amax). A block scale that rounds to zero
    quantizes its block to zeros, as NVIDIA's TensorRT-LLM kernels do (output scale 0), and so
    does an all-zero block and a per-tensor amax of 0 (or below 2**-24). torchao differs for
    small blocks: it clamps the block scale to at least 2**-6 (E4M3's smallest normal), which
    changes every block with (block_amax / 6) / t below 2**-6.
    """
    values = float32(x)
    if kernels.takes(values):  # checked first: nothing watching sees the numbers read out

        def numbers() -> tuple[float, float, float]:
            tensor_amax = amax.detach().float().cpu().reshape(())
            scale = tensor_amax / NVFP4_TENSOR_RANGE
            return scale.item(), (1.0 / scale).item(), float(tensor_amax > ZERO_AMAX)

        read = _per_tensor(("nvfp4", float(amax)), numbers)
        native = kernels.native_blocks(
            "nvfp4", values, block_size, axis, read, E2M1, E4M3, bounds=bounds
        )
        if native is not None:
            return straight_through(x, native)
    values = _bounded(values, bounds)
    amax = amax.detach().float().to(values.device).reshape(())
    tensor_scale = amax / NVFP4_TENSOR_RANGE
    blocks, dim = split_blocks(values, block_size, axis)
    block_scale = cast_element(block_amax(blocks, dim) / E2M1.max_normal / tensor_scale, E4M3)
    # NaN compares unequal to zero: a block holding NaN keeps its NaN scale. Elsewhere a block
    # without a usable scale is divided by 1 (so that Inf saturates instead of making 0 * Inf)
    # and multiplied back by 0.
    usable = (block_scale != 0) & (amax > ZERO_AMAX)
    inverse = torch.where(usable, (1.0 / tensor_scale) / block_scale, 1.0)
    back = torch.where(usable, tensor_scale * block_scale, 0.0)
    quantized = cast_element_(blocks * inverse, E2M1).mul_(back)
    return straight_through(x, merge_blocks(quantized, values.shape, axis))


def group_int_fake_quantize(
    x: Tensor,
    num_bits: int,
    group_size: int,
    axis: int = -1,
    unsigned: bool = False,
    narrow_range: bool = False,
    scale_dtype: torch.dtype | None = torch.float16,
    bounds: Bounds = None,
) -> Tensor:
    """Symmetric integer fake quantization with one scale per group of `group_size` consecutive
    values along `axis` (last partial group padded), amax = max|x| of the group, the same formula
    as quantizer.py's integer quantizer (bound = 2**(bits-1+unsigned)-1, scale = bound/amax,
    clamp(round(x*scale), low, bound)/scale), with the scale (amax/bound) stored in `scale_dtype`
    (None: float32, no rounding) as a deployed group-wise INT4/INT8 weight holds it. All-zero
    group -> zeros.

    None computes exactly as modelopt's static block quantization (`block_sizes={-1: n}`), which
    keeps float32 scales. With a `scale_dtype` the stored scale s = amax / bound is rounded to
    it, saturated at its largest finite value, and values come back as
    clamp(round(x / s), low, bound) * s, what a kernel reading the deployed integers computes; a
    scale that underflows to zero quantizes its group to zeros. A group holding ±Inf or NaN comes
    back NaN (modelopt's formula gives 0/0 there).
    """
    high = 2 ** (num_bits - 1 + int(unsigned)) - 1
    low = 0 if unsigned else (-high if narrow_range else -high - 1)
    values = float32(x)
    if scale_dtype in (None, torch.float16):
        kind = "group_float32" if scale_dtype is None else "group_fp16"
        scale_element = None if scale_dtype is None else kernels.FP16
        integers = (float(low), float(high))
        native = kernels.native_blocks(
            kind, values, group_size, axis, (float(high),), None, scale_element, integers, bounds
        )
        if native is not None:
            return straight_through(x, native)
    values = _bounded(values, bounds)
    groups, dim = split_blocks(values, group_size, axis)
    amax = block_amax(groups, dim)
    if scale_dtype is None:
        zero = amax <= ZERO_AMAX
        # A tensor divided, as modelopt does: torch computes `high / amax` (a Python number
        # over a tensor) as high * (1 / amax), one rounding more, and an ulp apart at times.
        multiplier = torch.where(zero, 0.0, torch.full_like(amax, high) / amax)
        divisor = torch.where(zero, 1.0, multiplier)
        quantized = (groups * multiplier).round_().clamp_(low, high).div_(divisor)
    else:
        scale = (amax / high).clamp_(max=torch.finfo(scale_dtype).max).to(scale_dtype).float()
        scale.masked_fill_(amax.isinf(), float("nan"))
        zero = (amax <= ZERO_AMAX) | (scale == 0)
        divisor = torch.where(zero, 1.0, scale)
        quantized = (groups / divisor).round_().clamp_(low, high).mul_(scale.masked_fill_(zero, 0))
    return straight_through(x, merge_blocks(quantized, values.shape, axis))
