"""Calibrators: collect statistics of a tensor stream and choose amax from them.

`max` keeps the running max of |x| (per channel for an axis). The histogram calibrators keep a
histogram of |x| (2048 bins to start; bins of the same width are appended when a later batch
reaches further) and choose amax by `percentile` (the given share of values below amax),
`mse` (the candidate edge with the least squared quantization error over the histogram) or
`entropy` (the candidate edge whose quantized distribution diverges least from the original,
by Kullback-Leibler; the rules themselves are in amax_rules.py). Candidates are the bin edges
from bin 128 on, at most about 2048 of them; a histogram holds at most 4 x 2048 bins
(neighbours merge when a far outlier arrives), so choosing amax costs the same for any amount of
data. mse and entropy depend on the bit width: their amax is computed per width from the kept
histogram, never from the data again.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from model_explorer.errors import UserError
from model_explorer.quantization.amax_rules import entropy_amax, mse_amax, percentile_amax


class Calibrator:
    """Collects statistics with `collect(x)`; `compute_amax(num_bits, unsigned)` chooses amax."""

    method: str = ""
    depends_on_bits = False

    def __init__(self) -> None:
        self.min_value: float | None = None

    def reset(self) -> None:
        self.min_value = None

    def _track_min(self, x: Tensor) -> None:
        low = float(x.min()) if x.numel() else math.inf
        self.min_value = low if self.min_value is None else min(self.min_value, low)

    def collect(self, x: Tensor) -> None:
        raise NotImplementedError

    def compute_amax(self, num_bits: int, unsigned: bool = False) -> Tensor | None:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Plain data (tensors, numbers, strings) that `from_state` turns back into a calibrator."""
        raise NotImplementedError


class MaxCalibrator(Calibrator):
    """amax = max |x| seen, over everything (axis None) or per index along `axis`."""

    method = "max"

    def __init__(self, axis: int | None = None) -> None:
        super().__init__()
        self.axis = axis
        self.amax: Tensor | None = None

    def reset(self) -> None:
        super().reset()
        self.amax = None

    def collect(self, x: Tensor) -> None:
        x = x.detach()
        self._track_min(x)
        if self.axis is None:
            current = x.abs().amax().float()
        else:
            if not -x.dim() <= self.axis < x.dim():
                raise UserError(
                    f"quantization.input.axis: axis {self.axis} is outside the {x.dim()} "
                    f"dimensions of the tensors its quantizers see (shape {list(x.shape)}); "
                    f"use {-x.dim()} to {x.dim() - 1}, or null for per tensor"
                )
            axis = self.axis % x.dim()
            dims = [d for d in range(x.dim()) if d != axis]
            current = x.abs().amax(dim=dims).float() if dims else x.abs().float()
        self.amax = current if self.amax is None else torch.maximum(self.amax, current)

    def compute_amax(self, num_bits: int, unsigned: bool = False) -> Tensor | None:
        return None if self.amax is None else self.amax.clone()

    def state(self) -> dict[str, Any]:
        return {"method": self.method, "axis": self.axis, "amax": self.amax, "min": self.min_value}


class HistogramCalibrator(Calibrator):
    """A histogram of |x| with bins of fixed width from 0; amax chosen by `method`."""

    depends_on_bits = True

    def __init__(
        self,
        method: str = "percentile",
        num_bins: int = 2048,
        percentile: float = 99.99,
        start_bin: int = 128,
        max_bins: int | None = None,
    ) -> None:
        super().__init__()
        if method not in ("percentile", "mse", "entropy"):
            raise ValueError(f"unknown histogram method {method!r}")
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must be in (0, 100], got {percentile}")
        self.method = method
        self.depends_on_bits = method != "percentile"
        self.num_bins = num_bins
        self.percentile = percentile
        self.start_bin = start_bin
        self.max_bins = max_bins or 4 * num_bins
        self.reset()

    def reset(self) -> None:
        super().reset()
        self.histogram: Tensor | None = None  # float64 counts on the data's device
        self.bin_width = 0.0
        self._amax_by_bits: dict[tuple[int, bool], Tensor] = {}

    @property
    def edges(self) -> Tensor:
        count = 0 if self.histogram is None else len(self.histogram)
        return torch.arange(count + 1, dtype=torch.float64) * self.bin_width

    def collect(self, x: Tensor) -> None:
        values = x.detach().float().abs().flatten()
        if values.numel() == 0:
            return
        self._track_min(x.detach())
        self._amax_by_bits.clear()
        top = float(values.max())
        if self.histogram is None:
            self.histogram = torch.zeros(self.num_bins, dtype=torch.float64, device=values.device)
        if self.bin_width == 0.0:
            if top == 0:  # every value so far is zero: count them in the first bin
                self.histogram[0] += values.numel()
                return
            self.bin_width = top / self.num_bins  # the first non-zero batch sets the bin width
        needed = math.ceil(top / self.bin_width)
        if needed > len(self.histogram):
            if needed > self.max_bins:
                # A far outlier: merge neighbouring bins rather than grow without bound.
                factor = math.ceil(needed / self.max_bins)
                padded = torch.nn.functional.pad(self.histogram, (0, -len(self.histogram) % factor))
                self.histogram = padded.reshape(-1, factor).sum(dim=1)
                self.bin_width *= factor
                needed = math.ceil(top / self.bin_width)
            grown = torch.zeros(needed, dtype=torch.float64, device=values.device)
            grown[: len(self.histogram)] = self.histogram
            self.histogram = grown
        bins = len(self.histogram)
        counts = torch.histc(values, bins=bins, min=0.0, max=bins * self.bin_width)
        self.histogram += counts.to(torch.float64)

    def compute_amax(self, num_bits: int, unsigned: bool = False) -> Tensor | None:
        if self.histogram is None:
            return None
        key = (num_bits, unsigned) if self.depends_on_bits else (0, False)
        if key not in self._amax_by_bits:
            counts = self.histogram.cpu().numpy()
            if self.bin_width == 0.0 or counts.sum() == 0:
                amax = 0.0
            elif self.method == "percentile":
                amax = percentile_amax(counts, self.bin_width, self.percentile)
            elif self.method == "mse":
                amax = mse_amax(counts, self.bin_width, num_bits, unsigned, self.start_bin)
            else:
                amax = entropy_amax(counts, self.bin_width, num_bits, unsigned, self.start_bin)
            self._amax_by_bits[key] = torch.tensor(amax, dtype=torch.float32)
        return self._amax_by_bits[key].clone()

    def state(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "num_bins": self.num_bins,
            "percentile": self.percentile,
            "start_bin": self.start_bin,
            "histogram": None if self.histogram is None else self.histogram.cpu(),
            "bin_width": self.bin_width,
            "min": self.min_value,
        }


CALIBRATION_METHODS = ("max", "percentile", "mse", "entropy")


def make_calibrator(
    method: str, axis: int | None = None, num_bins: int = 2048, percentile: float = 99.99
) -> Calibrator:
    """A fresh calibrator for a method name."""
    if method == "max":
        return MaxCalibrator(axis)
    if axis is not None:
        raise ValueError(
            f"the {method} calibrator works per tensor only (axis None), got axis {axis}"
        )
    return HistogramCalibrator(method, num_bins=num_bins, percentile=percentile)


def calibrator_from_state(state: dict[str, Any]) -> Calibrator:
    """The inverse of `Calibrator.state()`."""
    if state["method"] == "max":
        calibrator: Calibrator = MaxCalibrator(state["axis"])
        calibrator.amax = state["amax"]
    else:
        calibrator = HistogramCalibrator(
            state["method"], state["num_bins"], state["percentile"], state["start_bin"]
        )
        calibrator.histogram = state["histogram"]
        calibrator.bin_width = state["bin_width"]
    calibrator.min_value = state["min"]
    return calibrator
