"""Test material for the fake-quantization kernels: tensors of hard values, and comparison bit
for bit."""

from __future__ import annotations

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

SIZE = 2**18 + 4093  # split across threads, not a multiple of a vector


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


class Watching(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        return func(*args, **(kwargs or {}))
