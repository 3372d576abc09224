"""Calibrators: collect statistics of a tensor stream and choose amax from them.

Each calibration method (`calibration.method`) is an entry of CALIBRATORS: a Calibrator class
with its own options model (the keys beside `method`), its rule for amax, whether that amax
depends on the bit width, and its state (plain data that a calibration file stores).

`max` keeps the running max of |x| (per channel for an axis). The histogram calibrators keep a
histogram of |x| (`num_bins` bins to start, 2048 by default; bins of the same width are appended
when a later batch reaches further) and choose amax by `percentile` (the given share of values
below amax), `mse` (the candidate edge with the least squared quantization error over the
histogram) or `entropy` (the candidate edge whose quantized distribution diverges least from the
original, by Kullback-Leibler); the rules themselves are in amax_rules.py. Candidates are the bin
edges from `start_bin` (128) on, at most about 2048 of them; a histogram holds at most
4 x num_bins bins (neighbours merge when a far outlier arrives), so choosing amax costs the same
for any amount of data. mse and entropy depend on the bit width: their amax is computed per width
from the kept histogram, never from the data again.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from pydantic import ValidationError
from torch import Tensor

from model_explorer.errors import UserError, did_you_mean
from model_explorer.quantization.amax_rules import entropy_amax, mse_amax, percentile_amax
from model_explorer.registry import Registry
from model_explorer.schema import (
    NonNegativeInt,
    Percentage,
    PositiveInt,
    Spec,
    validation_problems,
)

CALIBRATORS: Registry[type[Calibrator]] = Registry("calibrator")

C = TypeVar("C", bound="type[Calibrator]")


def register_calibrator(cls: C) -> C:
    """Class decorator: register a Calibrator under its `method`, with its `Options` model."""
    return CALIBRATORS.register(cls.method, options=cls.Options)(cls)


class Calibrator:
    """Collects statistics with `collect(x)`; `compute_amax(num_bits, unsigned)` chooses amax.

    A registered subclass names its `method`, its `Options` (the pydantic model of its options;
    None: it takes none), whether its amax `depends_on_bits` and whether it works `per_channel`
    (along an axis), and builds itself from options with `build`, from a state with
    `from_state`."""

    method: ClassVar[str] = ""
    Options: ClassVar[type[Spec] | None] = None
    depends_on_bits: ClassVar[bool] = False
    per_channel: ClassVar[bool] = False

    def __init__(self) -> None:
        self.min_value: float | None = None

    @classmethod
    def build(cls, options: Any = None, axis: int | None = None) -> Calibrator:
        """A fresh calibrator with `options` (an `Options`; None: the defaults) for quantizers
        along `axis` (None: per tensor)."""
        raise NotImplementedError

    @classmethod
    def summary(cls, options: Any) -> str:
        """The method and the options that matter, as a report names them."""
        return cls.method

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
        """Plain data (tensors, numbers, strings) that `from_state` turns back into a calibrator;
        `method` names the entry."""
        raise NotImplementedError

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Calibrator:
        raise NotImplementedError


@register_calibrator
class MaxCalibrator(Calibrator):
    """amax = max |x| seen, over everything (axis None) or per index along `axis`; the same for
    every bit width."""

    method = "max"
    per_channel = True

    def __init__(self, axis: int | None = None) -> None:
        super().__init__()
        self.axis = axis
        self.amax: Tensor | None = None

    @classmethod
    def build(cls, options: Any = None, axis: int | None = None) -> MaxCalibrator:
        return cls(axis)

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

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MaxCalibrator:
        calibrator = cls(state["axis"])
        calibrator.amax = state["amax"]
        calibrator.min_value = state["min"]
        return calibrator


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
            empty = self.bin_width == 0.0 or counts.sum() == 0
            amax = 0.0 if empty else self.choose_amax(counts, num_bits, unsigned)
            self._amax_by_bits[key] = torch.tensor(amax, dtype=torch.float32)
        return self._amax_by_bits[key].clone()

    def state(self) -> dict[str, Any]:
        return {
            "method": self.method,
            **self.options.model_dump(),
            "histogram": None if self.histogram is None else self.histogram.cpu(),
            "bin_width": self.bin_width,
            "min": self.min_value,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> HistogramCalibrator:
        # Files written before calibrators were a registry hold every histogram method's options
        # (num_bins, percentile, start_bin): each takes its own.
        fields = cls.Options.model_fields  # type: ignore[union-attr]
        options = cls.Options.model_validate({k: state[k] for k in fields if k in state})  # type: ignore[union-attr]
        calibrator = cls(options)
        calibrator.histogram = state["histogram"]
        calibrator.bin_width = state["bin_width"]
        calibrator.min_value = state["min"]
        return calibrator


class PercentileOptions(Spec):
    """`percentile`: the share of |x| (in %) that lies below amax; `num_bins`: the histogram's
    bins to start with."""

    percentile: Percentage = 99.99
    num_bins: PositiveInt = 2048


class SearchOptions(Spec):
    """The options of a search for amax among the histogram's bin edges: `num_bins` to start
    with, the candidates from bin `start_bin` on."""

    num_bins: PositiveInt = 2048
    start_bin: NonNegativeInt = 128


@register_calibrator
class PercentileCalibrator(HistogramCalibrator):
    """amax: the upper edge of the bin where the cumulative share of |x| reaches `percentile`;
    the same for every bit width."""

    method = "percentile"
    Options = PercentileOptions

    @classmethod
    def summary(cls, options: Any) -> str:
        return f"percentile {options.percentile}"

    def choose_amax(self, counts: np.ndarray, num_bits: int, unsigned: bool) -> float:
        return percentile_amax(counts, self.bin_width, self.options.percentile)


@register_calibrator
class MseCalibrator(HistogramCalibrator):
    """amax: the candidate edge with the least squared quantization error over the histogram,
    per bit width."""

    method = "mse"
    Options = SearchOptions
    depends_on_bits = True

    def choose_amax(self, counts: np.ndarray, num_bits: int, unsigned: bool) -> float:
        return mse_amax(counts, self.bin_width, num_bits, unsigned, self.options.start_bin)


@register_calibrator
class EntropyCalibrator(HistogramCalibrator):
    """amax: the candidate edge whose quantized distribution diverges least (Kullback-Leibler)
    from the histogram, per bit width."""

    method = "entropy"
    Options = SearchOptions
    depends_on_bits = True

    def choose_amax(self, counts: np.ndarray, num_bits: int, unsigned: bool) -> float:
        return entropy_amax(counts, self.bin_width, num_bits, unsigned, self.options.start_bin)


def calibrator_options(method: str, options: dict[str, Any], where: str = "calibration") -> Any:
    """`options` checked by the options model of calibrator `method` (None for one that takes
    none): an option it does not take, or a bad value, is one UserError naming it at `where`."""
    entry = CALIBRATORS.get(method, where)
    known = set((entry.options or Spec).model_fields)
    for key in options:
        if key not in known:
            raise UserError(f"{where}: {_not_an_option(method, key, known)}")
    if entry.options is None:
        return None
    try:
        return entry.options.model_validate(options)
    except ValidationError as error:
        key, text = validation_problems(error, options)[0]
        raise UserError(f"{where}: {key.removeprefix('workload.')} {text}") from None


def _not_an_option(method: str, key: str, known: set[str]) -> str:
    """What to say of `key`, an option the `method` calibrator does not take: which do."""
    takers = [e.name for e in CALIBRATORS.entries() if key in (e.options or Spec).model_fields]
    if not takers:
        return (
            f"the {method} calibrator takes no option '{key}'{did_you_mean(key, known)}; its "
            f"options: {', '.join(sorted(known)) or 'none'}"
        )
    several = len(takers) > 1
    names = f"{', '.join(takers[:-1])} and {takers[-1]}" if several else takers[0]
    return (
        f"only the {names} calibrator{'s take' if several else ' takes'} '{key}', not {method}; "
        f"choose method '{takers[0]}' or leave '{key}' out"
    )


def make_calibrator(method: str, axis: int | None = None, **options: Any) -> Calibrator:
    """A fresh calibrator of a registered method (`model-explorer list calibrators`).

    Args:
        method: the calibrator's name in CALIBRATORS: `max`, `percentile`, `mse` or `entropy`.
        axis: the axis of per-channel amax (None: per tensor); only `max` works per channel.
        **options: the method's own options (e.g. `percentile=99.9`, `num_bins=1024`), checked
            by its options model; one it does not take is an error.
    """
    checked = calibrator_options(method, options)
    return CALIBRATORS.get(method).builder.build(checked, axis)


def calibrator_from_state(state: dict[str, Any]) -> Calibrator:
    """The inverse of `Calibrator.state()`: the calibrator of the state's `method`."""
    entry = CALIBRATORS.lookup(state["method"])
    if entry is None:
        raise ValueError(f"unknown calibration method {state['method']!r}")
    return entry.builder.from_state(state)
