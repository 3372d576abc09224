"""Block sparsification of a layer's input in the im2col domain (the original tool's definition).

A layer's input is viewed as its im2col matrix: per sample and group, one row per output
position (L rows) and one column per input channel x kernel element of the group (K columns).
The matrix is cut into non-overlapping blocks, `width` columns by `height` rows; blocks at the
right and bottom edges are padded with zeros to the full block size, and a block's mean |value|
is taken over the full block. Every block whose mean is below the layer's threshold is zeroed
before the layer computes: "present" blocks were all zero already, "created" blocks were zeroed
by the threshold. The layer then multiplies its weights with the sparsified matrix, so its output
equals the original layer applied to the sparsified input.

The block means of a convolution's input come from convolutions of |x| that sum each block's
columns at every output position, without the matrix (`convolved_means`: one convolution with
a 0/1 weight per block, or, for wide layers, depthwise convolutions of each channel's part of
the blocks); those of a Linear layer's input, and of an input holding an Inf or NaN, from the
matrix copied once into a tensor of whole blocks. The matrix is built where blocks are zeroed.
Everything is vectorised over the batch; large inputs are processed in chunks of samples so
that the padded matrix stays within a memory budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model_explorer.sparsity import kernel


@dataclass(frozen=True)
class Geometry:
    """How a layer's input becomes its im2col matrix."""

    groups: int
    columns: int  # K: channels x kernel elements of one group
    rows: int  # L: output positions


def layer_geometry(layer: nn.Module, input_shape: tuple[int, ...]) -> Geometry:
    """The im2col matrix size of one sample, from the layer and its input shape (N, C, ...)."""
    if isinstance(layer, nn.Linear):
        return Geometry(1, layer.in_features, math.prod(input_shape[1:-1]))
    spatial = input_shape[2:]
    totals = kernel.padding_totals(layer)
    rows = math.prod(
        (size + total - d * (k - 1) - 1) // s + 1
        for size, total, d, k, s in zip(
            spatial, totals, layer.dilation, layer.kernel_size, layer.stride, strict=True
        )
    )
    columns = layer.in_channels // layer.groups * math.prod(layer.kernel_size)
    return Geometry(layer.groups, columns, rows)


def _conv_padding(layer: nn.Module, x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """The input padded explicitly when the layer's padding is not plain zero padding by
    numbers (a string like 'same', or another padding mode), and the padding left to unfold."""
    if isinstance(layer.padding, str) or layer.padding_mode != "zeros":
        mode = "constant" if layer.padding_mode == "zeros" else layer.padding_mode
        return F.pad(x, layer._reversed_padding_repeated_twice, mode=mode), (0,) * (x.dim() - 2)
    return x, tuple(layer.padding)


def _windows(layer: nn.Module, x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """(N, C, kh, kw, out_h, out_w) strided view of a convolution's (padded) input: every
    receptive field's values without copying, and the output's spatial shape."""
    x, padding = _conv_padding(layer, x)
    conv1d = isinstance(layer, nn.Conv1d)
    x, taps, stride, dilation, padding = kernel.as_two_dimensional(layer, x, padding)
    if any(padding):
        x = F.pad(x, (padding[1], padding[1], padding[0], padding[0]))
    n, channels, height, width = x.shape
    out_h = (height - dilation[0] * (taps[0] - 1) - 1) // stride[0] + 1
    out_w = (width - dilation[1] * (taps[1] - 1) - 1) // stride[1] + 1
    s_n, s_c, s_h, s_w = x.stride()
    view = x.as_strided(
        (n, channels, taps[0], taps[1], out_h, out_w),
        (s_n, s_c, s_h * dilation[0], s_w * dilation[1], s_h * stride[0], s_w * stride[1]),
    )
    return view, ((out_w,) if conv1d else (out_h, out_w))


def im2col(layer: nn.Module, x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
    """(N, G, K, L) matrix of a Conv1d/Conv2d/Linear input and the output's spatial shape.

    Columns are ordered (channel, kernel row, kernel column) as in F.unfold. The matrix is
    copied out of a strided view of the padded input, which measured 2-9x faster on the CPU
    than F.unfold for the layer sizes of small CNNs."""
    if isinstance(layer, nn.Linear):
        rows = x.reshape(x.shape[0], -1, x.shape[-1])  # (N, L, F)
        return rows.transpose(1, 2).unsqueeze(1), tuple(x.shape[1:-1])
    view, spatial = _windows(layer, x)
    return view.reshape(view.shape[0], layer.groups, -1, math.prod(spatial)), spatial


def padded_im2col(
    layer: nn.Module, x: Tensor, block_size: tuple[int, int]
) -> tuple[Tensor, int, int, tuple[int, ...]]:
    """The im2col matrix copied into a new (N, G, K', L') tensor whose sides are whole
    multiples of the block size, zeros in the margin: every block, the edge ones too, is then
    a plain window of it. Also K, L and the output's spatial shape."""
    width, height = block_size
    if isinstance(layer, nn.Linear):
        rows = x.reshape(x.shape[0], -1, x.shape[-1])
        source, spatial = rows.transpose(1, 2).unsqueeze(1), tuple(x.shape[1:-1])
    else:
        windows, spatial = _windows(layer, x)
        source = windows.unflatten(1, (layer.groups, -1))  # (N, G, C / G, kh, kw, *spatial)
    n, groups = source.shape[:2]
    columns = math.prod(source.shape[2 : source.dim() - len(spatial)])
    rows_count = math.prod(spatial)
    padded_columns = math.ceil(columns / width) * width
    padded_rows = math.ceil(rows_count / height) * height
    margin = padded_columns != columns or padded_rows != rows_count
    matrix = (x.new_zeros if margin else x.new_empty)(n, groups, padded_columns, padded_rows)
    matrix[:, :, :columns, :rows_count].view(source.shape).copy_(source)
    return matrix, columns, rows_count, spatial


def col2out(
    layer: nn.Module, cols: Tensor, weight: Tensor, bias: Tensor | None, spatial: tuple[int, ...]
) -> Tensor:
    """The layer's output from its (sparsified) im2col matrix: weights times columns."""
    n, groups, k, rows = cols.shape
    w = weight.reshape(groups, -1, k)  # (G, out / G, K)
    if groups == 1 and rows < 16:
        # Few output positions (deep layers): one large GEMM beats N thin ones.
        out = (cols[:, 0].transpose(1, 2).reshape(-1, k) @ w[0].t()).view(n, rows, -1)
        out = out.transpose(1, 2)
    else:
        out = torch.matmul(w, cols).reshape(n, -1, rows)  # (N, G, out / G, L) -> (N, out, L)
    if bias is not None:
        out = out + bias.view(1, -1, 1)
    if isinstance(layer, nn.Linear):
        return out.transpose(1, 2).reshape(n, *spatial, -1)
    return out.reshape(n, -1, *spatial)


def dense_forward(layer: nn.Module, x: Tensor, weight: Tensor) -> Tensor:
    if isinstance(layer, nn.Linear):
        return F.linear(x, weight, layer.bias)
    return layer._conv_forward(x, weight, layer.bias)


# Block statistics by convolutions of |x| (below) cost, for one output channel per block
# across with 0/1 weights over every input channel, the blocks across times the matrix's
# columns in multiply-adds per output position; for depthwise convolutions of each channel's
# parts of the blocks (`block_pieces`), a few times the input's channels times the kernel's
# elements, though in a kernel some ten to forty times slower per multiply-add on the CPU. The
# depthwise ones are taken where the blocks across are more than PIECES_PER_BLOCKS times the
# parts per channel (the wide layers: 64 channels of 3x3 or more at 8 columns a block). From
# the matrix, the statistics cost about its size in memory traffic twice (|.| and the pooling).
# Measured on the CPU (resnet18 at 32x32 and the digits CNN, `benchmarks/bench_sparsity.py`),
# the convolutions were the faster way for every layer, where blocks are zeroed too (the
# matrix built after them skips the pooling); the limit on the blocks across, past which the
# matrix would give the statistics, is kept as a knob (the tests set it to 0).
CONVOLVED_STATISTICS_BLOCKS = 1 << 30
PIECES_PER_BLOCKS = 16


def block_indicator(layer: nn.Module, width: int, like: Tensor) -> Tensor:
    """The weights of a convolution that sums |x| over each block's columns: one output
    channel per group and block across, 1 where the block holds that input channel and kernel
    element (the matrix's column order), else 0."""
    groups = layer.groups
    per_group = layer.in_channels // groups
    columns = per_group * math.prod(layer.kernel_size)
    wide = math.ceil(columns / width)
    block_of = torch.arange(columns, device=like.device) // width  # each column's block
    indicator = (block_of == torch.arange(wide, device=like.device)[:, None]).to(like.dtype)
    return indicator.repeat(groups, 1).view(groups * wide, per_group, *layer.kernel_size)


def block_pieces(layer: nn.Module, width: int, like: Tensor) -> list[tuple[Tensor, Tensor]]:
    """How a convolution's input channels make its blocks' column sums: a block of `width`
    columns holds a run of one channel's kernel elements or the end of one channel's and the
    start of the next's. Piece j of each channel is its part of the j-th block it reaches
    (nothing where it reaches fewer). For each j: the weights of a depthwise convolution
    (1 on the piece's kernel elements, else 0) and each channel's block, numbered across the
    groups."""
    groups, kernel = layer.groups, layer.kernel_size
    per_group, taps = layer.in_channels // groups, math.prod(kernel)
    wide = math.ceil(per_group * taps / width)
    device = like.device
    start = torch.arange(per_group, device=device) * taps  # each channel's first column
    first, last = start // width, (start + taps - 1) // width
    column_block = (start[:, None] + torch.arange(taps, device=device)) // width  # (C, taps)
    offsets = torch.arange(groups, device=device)[:, None] * wide
    ones = [1] * len(kernel)
    pieces = []
    for j in range(int((last - first).max()) + 1):
        block = torch.minimum(first + j, last)  # past its last block a channel adds zeros
        mask = (column_block == block[:, None]) & (first + j <= last)[:, None]
        weights = mask.to(like.dtype).reshape(per_group, 1, *kernel).repeat(groups, 1, *ones)
        pieces.append((weights, (block[None, :] + offsets).reshape(-1)))
    return pieces


class BlockSparsifier(nn.Module):
    """Zeroes low-magnitude blocks of a layer's im2col input and counts blocks per sample."""

    def __init__(
        self,
        block_size: tuple[int, int] = (8, 8),
        threshold: float = 0.0,
        chunk_bytes: int = 64 << 20,
    ) -> None:
        super().__init__()
        width, height = block_size
        if width < 1 or height < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = (int(width), int(height))
        self.threshold = float(threshold)
        self.chunk_bytes = chunk_bytes
        self._weights: dict[tuple, Any] = {}  # column_sums' weights per layer geometry
        self._transposed: dict[str, Any] = {}  # the kernel's weights, and whose they are
        self.reset_stats()

    def reset_stats(self) -> None:
        # a plain dict: nn.Module's attribute setting cost some 4 us a count and layer
        self.counts: dict[str, Tensor | int] = dict.fromkeys(
            ("total_blocks", "present_blocks", "created_blocks", "samples"), 0
        )

    def stats(self) -> dict[str, int]:
        return {name: int(count) for name, count in self.counts.items()}

    def block_means(self, magnitudes: Tensor) -> Tensor:
        """Mean of every block of an (N, G, K', L') matrix of magnitudes whose sides are whole
        blocks (`padded_im2col`'s): (N, G, blocks wide, blocks high). Edge blocks hold the
        margin's zeros, so they are averaged over the full block size as defined."""
        n, groups, columns, rows = magnitudes.shape
        pooled = F.avg_pool2d(magnitudes.view(n * groups, 1, columns, rows), self.block_size)
        return pooled.view(n, groups, pooled.shape[2], pooled.shape[3])

    def zero_blocks(self, matrix: Tensor, drop: Tensor) -> Tensor:
        """Zero, in place, every block of a padded matrix marked in `drop` (N, G, blocks
        wide, blocks high). The mask is widened to whole rows first, so that the product runs
        along the matrix's contiguous rows: 2-4 times faster than a mask broadcast over both
        sides of every block. A dropped block's mean is finite, so it holds no Inf or NaN
        that a product with zero would keep."""
        n, groups, columns, rows = matrix.shape
        width, height = self.block_size
        keep = (~drop).to(matrix.dtype).repeat_interleave(height, dim=3)  # (N, G, wide, L')
        matrix.view(n, groups, columns // width, width, rows).mul_(keep.unsqueeze(3))
        return matrix

    def forward(self, layer: nn.Module, x: Tensor, weight: Tensor) -> Tensor:
        """Run `layer` (with `weight`) on `x` with its im2col input sparsified."""
        unbatched = isinstance(layer, nn.Linear) and x.dim() == 1
        if unbatched:
            x = x.unsqueeze(0)
        if kernel.applies(layer, x, weight):
            out = self._fused(layer, x, weight)
            return out.squeeze(0) if unbatched else out
        if kernel.wrong_width(layer, x):  # the runtime's layer says what is wrong
            return dense_forward(layer, x, weight)
        per_sample = self._bytes_per_sample(layer, x)
        step = max(1, self.chunk_bytes // max(per_sample, 1))
        outputs = [self._forward_chunk(layer, chunk, weight) for chunk in x.split(step)]
        out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
        return out.squeeze(0) if unbatched else out

    def _fused(self, layer: nn.Module, x: Tensor, weight: Tensor) -> Tensor:
        """The layer on `x` by the fused kernel (kernel.py): its statistics and, where blocks
        are dropped, its product in one pass; the runtime's layer where none is created."""
        padded, padding = (x, ()) if isinstance(layer, nn.Linear) else _conv_padding(layer, x)
        out, total, present, created = kernel.run(
            layer, padded, padding, weight, self._transposed, self.block_size, self.threshold
        )
        counts = self.counts
        counts["total_blocks"] += total
        # out of place: a count of the torch path's may be an inference tensor
        counts["present_blocks"] = counts["present_blocks"] + present
        counts["samples"] += x.shape[0]
        if out is None or created == 0:
            return dense_forward(layer, x, weight)
        counts["created_blocks"] = counts["created_blocks"] + created
        return out

    def _bytes_per_sample(self, layer: nn.Module, x: Tensor) -> int:
        """Bytes of the padded im2col matrix of one sample (three copies live at once)."""
        geometry = layer_geometry(layer, tuple(x.shape))
        width, height = self.block_size
        padded_columns = math.ceil(geometry.columns / width) * width
        padded_rows = math.ceil(geometry.rows / height) * height
        return geometry.groups * padded_columns * padded_rows * x.element_size() * 3

    def convolved_means(self, layer: nn.Module, x: Tensor) -> Tensor | None:
        """Every block's mean for a convolution's input without building its matrix: the sums
        of |x| over each block's columns at every output position (`column_sums`), and sums
        of `height` consecutive positions finish the blocks. None past
        CONVOLVED_STATISTICS_BLOCKS blocks across (no limit but in the tests), for Linear
        layers, and where a NaN or Inf in x made sums of blocks that do not hold it NaN (the
        product of Inf and a 0 weight): the matrix then gives each block its own mean."""
        if isinstance(layer, nn.Linear):
            return None
        width, height = self.block_size
        columns = layer.in_channels // layer.groups * math.prod(layer.kernel_size)
        if math.ceil(columns / width) > CONVOLVED_STATISTICS_BLOCKS:
            return None
        sums = self.column_sums(layer, x)
        n, blocks, rows = sums.shape
        sums = sums.view(n, layer.groups, blocks // layer.groups, rows)
        high = math.ceil(rows / height)
        if high * height != rows:
            sums = F.pad(sums, (0, high * height - rows))
        means = sums.view(*sums.shape[:3], high, height).sum(4) / (width * height)
        return None if bool(means.isnan().any()) else means

    def column_sums(self, layer: nn.Module, x: Tensor) -> Tensor:
        """(N, groups x blocks across, L): |x| summed over each block's columns at every output
        position, by one convolution with `block_indicator`'s weights or, for wide layers on
        the CPU, by depthwise ones whose parts are added into their blocks (`block_pieces`)."""
        geometry = (layer.in_channels, layer.groups, layer.kernel_size, x.dtype, x.device)
        width = self.block_size[0]
        wide = math.ceil(layer.in_channels // layer.groups * math.prod(layer.kernel_size) / width)
        weights = self._weights.get(geometry)
        if weights is None:
            weights = block_pieces(layer, width, x)
            # measured on the CPU; elsewhere the one convolution, whose sums do not depend on
            # the order of atomic additions
            if x.device.type != "cpu" or wide <= PIECES_PER_BLOCKS * len(weights):
                weights = block_indicator(layer, width, x)
            self._weights[geometry] = weights
        x, padding = _conv_padding(layer, x)
        magnitudes = x.abs()
        convolve = F.conv1d if isinstance(layer, nn.Conv1d) else F.conv2d
        settings = (layer.stride, padding, layer.dilation)
        if isinstance(weights, Tensor):
            sums = convolve(magnitudes, weights, None, *settings, layer.groups)
            return sums.reshape(sums.shape[0], sums.shape[1], -1)
        sums = None
        for piece, blocks in weights:
            part = convolve(magnitudes, piece, None, *settings, layer.in_channels)
            part = part.reshape(part.shape[0], layer.in_channels, -1)
            if sums is None:
                sums = part.new_zeros(part.shape[0], layer.groups * wide, part.shape[2])
            sums.index_add_(1, blocks, part)
        return sums

    def _forward_chunk(self, layer: nn.Module, x: Tensor, weight: Tensor) -> Tensor:
        means = self.convolved_means(layer, x)
        if means is None and self.threshold <= 0:
            # im2col(|x|) = |im2col(x)|, and |x| is many times smaller than the matrix.
            magnitudes, *_ = padded_im2col(layer, x.abs(), self.block_size)
            means = self.block_means(magnitudes)
        matrix = None
        if means is None:
            matrix, columns, rows, spatial = padded_im2col(layer, x, self.block_size)
            means = self.block_means(matrix.abs())
        present = self._count(means)
        if self.threshold <= 0:
            return dense_forward(layer, x, weight)  # nothing can be zeroed: the exact result
        drop = means < self.threshold
        created = drop & ~present
        if not bool(created.any()):
            return dense_forward(layer, x, weight)
        self.counts["created_blocks"] = self.counts["created_blocks"] + created.sum()
        if matrix is None:
            matrix, columns, rows, spatial = padded_im2col(layer, x, self.block_size)
        sparse = self.zero_blocks(matrix, drop)[:, :, :columns, :rows]
        return col2out(layer, sparse, weight, layer.bias, spatial)

    def _count(self, means: Tensor) -> Tensor:
        """Add a chunk's blocks to the statistics; returns which blocks are all zero."""
        present = means == 0  # a sum of magnitudes is zero only if every value is
        counts = self.counts
        counts["total_blocks"] += means.numel()
        counts["present_blocks"] = counts["present_blocks"] + present.sum()
        counts["samples"] += means.shape[0]
        return present
