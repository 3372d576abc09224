"""The fused block-sparse kernel (native/block_sparse.c): a layer's block statistics and its
product with the kept blocks in one pass over its input, without the im2col matrix.

The torch path (sparsifier.py) copies each layer's im2col matrix out of its input, zeroes the
dropped blocks and multiplies: the copy alone took about as long as the layer's own
convolution, and the statistics as long again. The kernel copies a few samples at a time into
a buffer with their padding, takes every block's mean from sums of windows along its rows, and
multiplies only the kept blocks' columns with the weights, reading the buffer in place
(block_sparse.c says how).

It is built once per machine by the C compiler (native/: where it is kept, and how to turn it
off), and the batch is split across torch's threads. It takes float32 CPU tensors of
convolutions (Conv1d, Conv2d) and Linear layers, where no gradient is wanted and nothing
records the operations (native.unwatched). Where no C
compiler works, one warning says so and the torch path runs: the same blocks, slower.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model_explorer import native

_FIELDS = (
    "channels height width sn sc sh sw kh kw stride_y stride_x dil_y dil_x pad_y pad_x "
    "out_h out_w cout groups bw bh on oc ol"
).split()


class _Geometry(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in _FIELDS]


def applies(layer: nn.Module, x: Tensor, weight: Tensor) -> bool:
    """Whether the kernel takes `layer` on `x`: float32 on the CPU, no gradient wanted,
    nothing watching the operations, and the kernel built."""
    if isinstance(layer, nn.Linear):
        shaped = x.dim() >= 2 and x.shape[-1] == weight.shape[1] == layer.in_features
    elif isinstance(layer, (nn.Conv1d, nn.Conv2d)):
        shaped = _fits(layer, x, weight)
    else:
        return False
    wants_gradient = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    return (
        shaped
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.device.type == "cpu"
        and weight.device.type == "cpu"
        and not wants_gradient
        and native.enabled()
        and native.unwatched(x)
        and type(x) is Tensor
        and function() is not None
    )


def wrong_width(layer: nn.Module, x: Tensor) -> bool:
    """Whether a batched `x` has other channels (features) than `layer` takes: the torch
    path's statistics would then fail with their own weights' shapes in the message."""
    if isinstance(layer, nn.Linear):
        return x.shape[-1] != layer.in_features
    batched = x.dim() == 2 + len(layer.kernel_size)
    return batched and x.shape[1] != layer.in_channels


def _fits(layer: nn.Module, x: Tensor, weight: Tensor) -> bool:
    """Whether `x` and `weight` have the shapes the convolution computes with, and every
    receptive field fits the input: anything else is left to the runtime's convolution, whose
    error says what is wrong (the kernel would read past its buffers)."""
    kernel, spatial = tuple(layer.kernel_size), x.shape[2:]
    if x.dim() != 2 + len(kernel) or x.shape[1] != layer.in_channels:
        return False
    if tuple(weight.shape) != (layer.out_channels, layer.in_channels // layer.groups, *kernel):
        return False
    return all(
        size + total >= d * (k - 1) + 1
        for size, total, d, k in zip(
            spatial, padding_totals(layer), layer.dilation, kernel, strict=True
        )
    )


def padding_totals(layer: nn.Module) -> list[int]:
    """A convolution's padding along each spatial dimension, both sides together, whether
    given as numbers or as a string ('same', 'valid') or padded in another mode."""
    if isinstance(layer.padding, str) or layer.padding_mode != "zeros":
        pads = layer._reversed_padding_repeated_twice  # (last dimension's before, after, ...)
        return [pads[2 * i] + pads[2 * i + 1] for i in range(len(layer.kernel_size))][::-1]
    return [2 * p for p in layer.padding]


def function() -> Any:
    """The kernel's C function; None where it could not be built."""
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    return native.function(
        "block_sparse",
        "block_sparse",
        [pointer, ctypes.POINTER(_Geometry), pointer, pointer, ctypes.c_float, ctypes.c_int]
        + [size, size, pointer, pointer],
        "fused block-sparsity kernel",
        "the layers run the torch path",
    )


def transposed(layer: nn.Module, weight: Tensor, kept: dict[str, Any]) -> Tensor:
    """`weight` as the kernel reads it, (groups, columns, a group's output channels): the copy
    in `kept` while it is of the same weights, unchanged (an inference tensor has no version
    to tell, so its copy is made anew each time)."""
    version = None if weight.is_inference() else (weight._version, tuple(weight.shape))
    if version is not None and kept.get("source") is weight and kept.get("version") == version:
        return kept["tensor"]
    groups = getattr(layer, "groups", 1)
    copy = weight.detach().reshape(groups, weight.shape[0] // groups, -1)
    copy = copy.transpose(1, 2).contiguous()
    kept.update(source=weight, version=version, tensor=copy)
    return copy


def as_two_dimensional(
    layer: nn.Module, x: Tensor, padding: tuple[int, ...]
) -> tuple[Tensor, tuple, tuple, tuple, tuple]:
    """A convolution's input as (N, C, H, W), with its kernel, stride, dilation and padding:
    a Conv1d's as a convolution of height 1."""
    kernel, stride, dilation = layer.kernel_size, layer.stride, layer.dilation
    if isinstance(layer, nn.Conv1d):
        return x.unsqueeze(2), (1, *kernel), (1, *stride), (1, *dilation), (0, *padding)
    return x, kernel, stride, dilation, padding


def _convolution(layer: nn.Module, x: Tensor, padding: tuple[int, ...]) -> tuple[Tensor, dict]:
    """A convolution's input as (N, C, H, W) and its geometry's fields (Conv1d as a
    convolution of height 1); `x` is padded already where its padding is not zeros."""
    x, kernel, stride, dilation, padding = as_two_dimensional(layer, x, padding)
    out = [
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, p, d, k, s in zip(x.shape[2:], padding, dilation, kernel, stride, strict=True)
    ]
    fields = dict(zip(("kh", "kw"), kernel, strict=True))
    fields.update(stride_y=stride[0], stride_x=stride[1], dil_y=dilation[0], dil_x=dilation[1])
    fields.update(pad_y=padding[0], pad_x=padding[1], out_h=out[0], out_w=out[1])
    return x, fields


def _shaped(
    layer: nn.Module, x: Tensor, padding: tuple[int, ...], groups: int, cout: int, multiply: bool
) -> tuple[Tensor, dict, Tensor | None, dict]:
    """The input as the kernel reads it, (N, C, H, W) (a Linear layer's as a 1x1
    convolution's, (N, features, 1, positions)), its geometry's fields, the output tensor
    (where `multiply`: the kernel writes it) and its strides."""
    n = x.shape[0]
    if isinstance(layer, nn.Linear):
        rows = x.reshape(n, -1, x.shape[-1])
        source = rows.transpose(1, 2).unsqueeze(2)
        fields = dict(kh=1, kw=1, stride_y=1, stride_x=1, dil_y=1, dil_x=1, pad_y=0, pad_x=0)
        fields.update(out_h=1, out_w=rows.shape[1])
        out = x.new_empty(n, *x.shape[1:-1], cout) if multiply else None
        return source, fields, out, dict(on=rows.shape[1] * cout, oc=1, ol=cout)
    source, fields = _convolution(layer, x, padding)
    spatial = (fields["out_h"], fields["out_w"])[1 if isinstance(layer, nn.Conv1d) else 0 :]
    positions = fields["out_h"] * fields["out_w"]
    out = x.new_empty(n, groups * cout, *spatial) if multiply else None
    return source, fields, out, dict(on=groups * cout * positions, oc=positions, ol=1)


def run(
    layer: nn.Module,
    x: Tensor,
    padding: tuple[int, ...],
    weight: Tensor,
    kept: dict[str, Any],
    block_size: tuple[int, int],
    threshold: float,
) -> tuple[Tensor | None, int, int, int]:
    """The layer's output from its kept blocks (None with a threshold of 0 or below, where
    nothing is dropped: then only the blocks holding nothing but zeros are counted), and how
    many blocks there are, hold only zeros, and were dropped besides those. `x` is the layer's
    input (a convolution's padded where its padding is not zeros, `padding` the rest),
    `weight` its weights, read as (groups, columns, a group's output channels) from the copy
    in `kept` (`transposed`) where blocks may be dropped."""
    dropping = threshold > 0
    linear = isinstance(layer, nn.Linear)
    multiply = dropping and not linear  # a Linear layer's product is torch's, on zeroed rows
    groups = getattr(layer, "groups", 1)
    columns, cout = math.prod(weight.shape[1:]), weight.shape[0] // groups
    n = x.shape[0]
    source, fields, out, strides = _shaped(layer, x, padding, groups, cout, multiply)
    masked = x.new_empty(x.shape) if linear and dropping else None  # the kernel zeroes blocks
    channels = source.shape[1] // groups
    if columns != channels * fields["kh"] * fields["kw"]:  # the kernel would read past them
        raise ValueError(f"weights of {columns} columns for an input of {channels} channels")
    width, height = block_size
    geometry = _Geometry(
        channels,
        *source.shape[2:],
        *source.stride(),
        **fields,
        cout=cout,
        groups=groups,
        bw=width,
        bh=height,
        **strides,
    )
    blocks = n * groups * -(-columns // width) * -(-fields["out_h"] * fields["out_w"] // height)
    bias = None if layer.bias is None or not multiply else layer.bias.detach().contiguous()
    wt = transposed(layer, weight, kept).data_ptr() if multiply else None
    arguments = (source.data_ptr(), ctypes.byref(geometry), wt)
    arguments += (None if bias is None else bias.data_ptr(), threshold, int(multiply))
    present, created = _in_threads(arguments, n, out if masked is None else masked)
    if masked is not None and created:
        out = F.linear(masked, weight, layer.bias)
    return out, blocks, present, created


def _in_threads(arguments: tuple, n: int, out: Tensor | None) -> tuple[int, int]:
    """The kernel on samples [0, n), split across torch's threads: how many blocks hold only
    zeros, and how many others were dropped."""
    spans = native.ranges(n)
    tallies = (ctypes.c_int64 * (2 * len(spans)))()
    written = None if out is None else out.data_ptr()
    calls = [
        (*arguments, start, end, written, ctypes.byref(tallies, 16 * i))
        for i, (start, end) in enumerate(spans)
    ]
    native.in_threads(function(), calls, "block-sparsity kernel")
    return sum(tallies[0::2]), sum(tallies[1::2])
