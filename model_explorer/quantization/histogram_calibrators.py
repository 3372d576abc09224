"""The histogram calibrators: a histogram of |x| (and of the negative values' magnitudes, in the
same bins) from which `percentile`, `mse` and `entropy` choose amax, per bit width where the
rule depends on it (see calibrators.py for the registry and the rules' summary; the rules
themselves are in amax_rules.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from model_explorer.errors import UserError
from model_explorer.quantization.amax_rules import (
    asymmetric_mse_range,
    entropy_amax,
    mse_amax,
    percentile_amax,
)
from model_explorer.quantization.calibrators import (
    Calibrator,
)
from model_explorer.quantization.spec import RECALIBRATE, PercentileOptions, SearchOptions


class HistogramCalibrator(Calibrator):
    """A histogram of |x| with bins of fixed width from 0 (per tensor only); a subclass's
    `choose_amax` picks amax from it. Its options hold `num_bins`, the bins to start with."""

    def __init__(self, options: Any = None) -> None:
        super().__init__()
        self.options = options if options is not None else self.Options()  # type: ignore[misc]
        self.num_bins: int = self.options.num_bins
        self.max_bins = 4 * self.num_bins
        self.reset()

    @classmethod
    def build(cls, options: Any = None, axis: int | None = None) -> HistogramCalibrator:
        if axis is not None:
            raise ValueError(
                f"the {cls.method} calibrator works per tensor only (axis None), got axis {axis}"
            )
        return cls(options)

    def choose_amax(self, counts: np.ndarray, num_bits: int, unsigned: bool) -> float:
        """amax from the histogram's `counts` (bins of `self.bin_width`, some non-zero)."""
        raise NotImplementedError

    def reset(self) -> None:
        super().reset()
        self.histogram: Tensor | None = None  # float64 counts of |x| on the data's device
        self.negative: Tensor | None = None  # the same of the negative values only
        self.bin_width = 0.0
        self._amax_by_bits: dict[tuple[int, bool], Tensor] = {}
        self._range_by_bits: dict[int, tuple[float, float]] = {}  # (|low|, high) per width

    @property
    def edges(self) -> Tensor:
        count = 0 if self.histogram is None else len(self.histogram)
        return torch.arange(count + 1, dtype=torch.float64) * self.bin_width

    def collect(self, x: Tensor) -> None:
        flat = x.detach().float().flatten()
        values = flat.abs()
        if values.numel() == 0:
            return
        self._track_min(x.detach())
        self._amax_by_bits.clear()
        self._range_by_bits.clear()
        top = float(values.max())
        if self.histogram is None:
            self.histogram = torch.zeros(self.num_bins, dtype=torch.float64, device=values.device)
            self.negative = torch.zeros_like(self.histogram)
        if self.bin_width == 0.0:
            if top == 0:  # every value so far is zero: count them in the first bin
                self.histogram[0] += values.numel()
                return
            self.bin_width = top / self.num_bins  # the first non-zero batch sets the bin width
        self._grow(math.ceil(top / self.bin_width))
        bins, top_edge = len(self.histogram), len(self.histogram) * self.bin_width
        counts = torch.histc(values, bins=bins, min=0.0, max=top_edge)
        self.histogram += counts.to(torch.float64)
        negatives = -flat[flat < 0]
        if negatives.numel():
            counts = torch.histc(negatives, bins=bins, min=0.0, max=top_edge)
            self.negative += counts.to(torch.float64)  # type: ignore[operator]

    def _grow(self, needed: int) -> None:
        """Room for `needed` bins: bins appended, or neighbours merged past `max_bins`."""
        if needed <= len(self.histogram):  # type: ignore[arg-type]
            return
        if self.negative is None:  # a state made before the negative side was kept
            self.negative = torch.zeros_like(self.histogram)
        if needed > self.max_bins:
            # A far outlier: merge neighbouring bins rather than grow without bound.
            factor = math.ceil(needed / self.max_bins)
            self.histogram, self.negative = (
                torch.nn.functional.pad(h, (0, -len(h) % factor)).reshape(-1, factor).sum(dim=1)
                for h in (self.histogram, self.negative)
            )
            self.bin_width *= factor
            needed = math.ceil(needed / factor)
        self.histogram, self.negative = (
            torch.nn.functional.pad(h, (0, max(0, needed - len(h))))
            for h in (self.histogram, self.negative)
        )

    def compute_amax(self, num_bits: int, unsigned: bool = False) -> Tensor | None:
        if self.histogram is None:
            return None
        key = (num_bits, unsigned) if self.depends_on_bits else (0, False)
        if key not in self._amax_by_bits:
            counts = self.histogram.cpu().numpy()
            empty = self.bin_width == 0.0 or counts.sum() == 0
            amax = 0.0 if empty else self.choose_amax(counts, num_bits, unsigned)
            self._amax_by_bits[key] = torch.tensor(amax, dtype=torch.float32)
        return self._amax_by_bits[key].clone()

    def sides(self) -> tuple[np.ndarray, np.ndarray]:
        """Counts of the positive values (and zeros) and of the negative values' magnitudes."""
        if self.negative is None:
            raise UserError(
                "calibration.file: the file was made before histograms kept the negative side; "
                f"recalibrate with {RECALIBRATE} for asymmetric "
                "quantizers"
            )
        counts = self.histogram.cpu().numpy()  # type: ignore[union-attr]
        negative = self.negative.cpu().numpy()
        return np.clip(counts - negative, 0, None), negative

    def compute_range(self, num_bits: int) -> tuple[float, float]:
        low, high = self.observed_range()
        if self.bin_width == 0.0 or high - low <= 0:
            return low, high
        key = num_bits if self.depends_on_bits else 0
        if key not in self._range_by_bits:
            positive, negative = self.sides()
            self._range_by_bits[key] = self.choose_range(positive, negative, num_bits)
        below, above = self._range_by_bits[key]
        return max(low, -below), min(high, above)

    def choose_range(
        self, positive: np.ndarray, negative: np.ndarray, num_bits: int
    ) -> tuple[float, float]:
        """(|low|, high) from the two sides' counts: a subclass's asymmetric rule."""
        raise self.no_asymmetric_rule()

    def state(self) -> dict[str, Any]:
        return {
            "method": self.method,
            **self.options.model_dump(),
            "histogram": None if self.histogram is None else self.histogram.cpu(),
            "negative": None if self.negative is None else self.negative.cpu(),
            "bin_width": self.bin_width,
            "min": self.min_value,
            "max": self.max_value,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> HistogramCalibrator:
        # Files written before calibrators were a registry hold every histogram method's options
        # (num_bins, percentile, start_bin): each takes its own.
        fields = cls.Options.model_fields  # type: ignore[union-attr]
        options = cls.Options.model_validate({k: state[k] for k in fields if k in state})  # type: ignore[union-attr]
        calibrator = cls(options)
        calibrator.histogram = state["histogram"]
        calibrator.negative = state.get("negative")
        calibrator.bin_width = state["bin_width"]
        calibrator.min_value = state["min"]
        calibrator.max_value = state.get("max")
        return calibrator


class PercentileCalibrator(HistogramCalibrator):
    """amax: the upper edge of the bin where the cumulative share of |x| reaches `percentile`;
    the same for every bit width."""

    method = "percentile"
    Options = PercentileOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        # A percentile per bit width makes amax depend on the width.
        self.depends_on_bits = isinstance(self.options.percentile, dict)

    @classmethod
    def summary(cls, options: Any) -> str:
        return f"percentile {options.percentile}"

    def choose_amax(self, counts: np.ndarray, num_bits: int, unsigned: bool) -> float:
        return percentile_amax(counts, self.bin_width, self.options.at(num_bits))

    def choose_range(
        self, positive: np.ndarray, negative: np.ndarray, num_bits: int
    ) -> tuple[float, float]:
        # Each side keeps the share `percentile` of its own values.
        share = self.options.at(num_bits)
        return tuple(
            percentile_amax(side, self.bin_width, share) if side.sum() else 0.0
            for side in (negative, positive)
        )


class MseCalibrator(HistogramCalibrator):
    """amax: the candidate edge with the least squared quantization error over the histogram,
    per bit width."""

    method = "mse"
    Options = SearchOptions
    depends_on_bits = True

    def choose_amax(self, counts: np.ndarray, num_bits: int, unsigned: bool) -> float:
        return mse_amax(counts, self.bin_width, num_bits, unsigned, self.options.start_bin)

    def choose_range(
        self, positive: np.ndarray, negative: np.ndarray, num_bits: int
    ) -> tuple[float, float]:
        low, high = self.observed_range()
        return asymmetric_mse_range(
            positive, negative, self.bin_width, num_bits, (-low, high), self.options.start_bin
        )


class EntropyCalibrator(HistogramCalibrator):
    """amax: the candidate edge whose quantized distribution diverges least (Kullback-Leibler)
    from the histogram, per bit width."""

    method = "entropy"
    Options = SearchOptions
    depends_on_bits = True

    def choose_amax(self, counts: np.ndarray, num_bits: int, unsigned: bool) -> float:
        return entropy_amax(counts, self.bin_width, num_bits, unsigned, self.options.start_bin)
