"""Blocks along an axis, exact powers of two, and the straight-through return of the formats."""

from __future__ import annotations

import torch
from torch import Tensor

# Below this an amax counts as zero and its values quantize to 0 (NVIDIA's threshold).
from model_explorer.formats.integer import ZERO_AMAX  # noqa: E402, F401 - re-exported


def split_blocks(x: Tensor, block_size: int, axis: int) -> tuple[Tensor, int]:
    """`x` seen as blocks of `block_size` consecutive values along `axis`: shape
    (*before, blocks, block_size, *after), and the dimension that holds a block's values.

    A view of `x` (no copy) when its length along `axis` is a multiple of `block_size` and `x` is
    contiguous, which keeps blocks along the channels of an NCHW tensor as cheap as along its last
    dimension, and when the axis is no longer than one block (the block is then that long).
    Otherwise the last block is padded with zeros, which leave its max |x| unchanged;
    `merge_blocks` removes them.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if x.dim() == 0:
        x = x.reshape(1)
    axis = axis % x.dim()
    shape = x.shape
    # An axis no longer than a block is one block: its padding would only add zeros to compute.
    block_size = max(min(block_size, shape[axis]), 1)
    padding = -shape[axis] % block_size
    if padding:
        zeros = x.new_zeros((*shape[:axis], padding, *shape[axis + 1 :]))
        x = torch.cat([x, zeros], dim=axis)
    blocks = (shape[axis] + padding) // block_size  # not -1: an empty tensor leaves it open
    return x.reshape(*shape[:axis], blocks, block_size, *shape[axis + 1 :]), axis + 1


def merge_blocks(blocks: Tensor, shape: torch.Size, axis: int) -> Tensor:
    """The inverse of `split_blocks` for a tensor of the original `shape`: padding dropped."""
    if not shape:
        return blocks.flatten()[0]  # a scalar: its one value, the rest was padding
    axis = axis % len(shape)
    merged = blocks.flatten(axis, axis + 1)
    if merged.shape[axis] != shape[axis]:
        merged = merged.narrow(axis, 0, shape[axis]).contiguous()
    return merged


def block_amax(blocks: Tensor, dim: int) -> Tensor:
    """max |x| of each block (NaN where a block holds NaN), kept as a dimension of size 1.

    abs() then amax: torch.aminmax would spare the copy but runs ten times slower on the CPU.
    """
    return blocks.abs().amax(dim=dim, keepdim=True)


def biased_exponent(amax: Tensor) -> Tensor:
    """The float32 exponent field of `amax` (non-negative; int32 in [0, 255]): floor(log2(amax))
    + 127 for a normal amax, exact where a log2 and a floor would round near powers of two, and
    five times faster than torch.frexp; 0 for zero and subnormals, 255 for Inf and NaN. MX reads
    a block's shared exponent from it."""
    return (amax.view(torch.int32) >> 23) & 0xFF


def exact_power_of_two(exponent: Tensor) -> Tensor:
    """2.0**exponent in float32 for integer exponents in [-127, 127], built from its bits: exact
    on every device by construction, 2**-127 (a float32 subnormal) included, which exp2 does not
    promise."""
    exponent = exponent.to(torch.int32)
    normal = (exponent + 127).clamp_(min=0).bitwise_left_shift_(23)
    bits = torch.where(exponent > -127, normal, torch.full_like(normal, 1 << 22))
    return bits.view(torch.float32)


class _StraightThrough(torch.autograd.Function):
    """The quantized values forward, the incoming gradient unchanged backward.

    Exact where `x + (q - x).detach()` is not: in float16 the difference is rounded, and where
    x is ±Inf (saturated to a finite q) it is NaN.
    """

    @staticmethod
    def forward(ctx, x: Tensor, quantized: Tensor) -> Tensor:
        return quantized

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


def float32(x: Tensor) -> Tensor:
    """`x` in float32 outside autograd: `x` itself where it is that already (a search's
    activations), so that no call is spent on it (each costs microseconds right after a
    forward pass's layers have taken the caches)."""
    if x.dtype is torch.float32 and not x.requires_grad:
        return x
    return x.detach().float()


def straight_through(x: Tensor, quantized: Tensor) -> Tensor:
    """`quantized` (float32) in `x`'s dtype; where `x` needs a gradient, it passes it through
    unchanged (the straight-through estimator), so that retraining works."""
    if quantized.dtype is not x.dtype:
        quantized = quantized.to(x.dtype)
    if torch.is_grad_enabled() and x.requires_grad:
        return _StraightThrough.apply(x, quantized)
    return quantized
