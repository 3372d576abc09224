"""Calibrators: collect statistics of a tensor stream and choose amax from them.

Each calibration method (`calibration.method`) is an entry of CALIBRATORS: a Calibrator class
with its own options model (the keys beside `method`), its rule for amax, whether that amax
depends on the bit width, and its state (plain data that a calibration file stores).

`max` keeps the running max of |x| (per channel for an axis). The histogram calibrators
(histogram_calibrators.py) keep a
histogram of |x| (`num_bins` bins to start, 2048 by default; bins of the same width are appended
when a later batch reaches further) and choose amax by `percentile` (the given share of values
below amax), `mse` (the candidate edge with the least squared quantization error over the
histogram) or `entropy` (the candidate edge whose quantized distribution diverges least from the
original, by Kullback-Leibler); the rules themselves are in amax_rules.py. Candidates are the bin
edges from `start_bin` (128) on, at most about 2048 of them; a histogram holds at most
4 x num_bins bins (neighbours merge when a far outlier arrives), so choosing amax costs the same
for any amount of data. mse and entropy depend on the bit width, and percentile where it names a
share per width: their amax is computed per width from the kept histogram, once, never from the
data again.

For an asymmetric quantizer (a zero point) `compute_range` chooses the range [low, high] (low <=
0 <= high): max takes the smallest and largest value seen, percentile applies its share to each
side (a second histogram of the negative values' magnitudes, in the same bins, tells the sides
apart), mse searches the observed range scaled down by one factor, with the error of the
asymmetric grid at that width. entropy's rule is symmetric and has no asymmetric form.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import torch
from pydantic import ValidationError
from torch import Tensor

from model_explorer.errors import UserError, did_you_mean
from model_explorer.quantization.spec import CALIBRATORS, CalibratorInfo
from model_explorer.schema.specs import (
    Spec,
    validation_problems,
)

# What to run where a calibration file does not fit it (calibration_file.py, the histogram
# calibrators); a caller of the Python API is told its own way instead (api/search.py).

C = TypeVar("C", bound="type[Calibrator]")


def register_calibrator(cls: C) -> C:
    """Class decorator: register a Calibrator under its `method`, with its `Options` model
    (the built-in ones are declared in spec.py)."""
    info = CalibratorInfo(per_channel=cls.per_channel)
    return CALIBRATORS.register(cls.method, options=cls.Options, info=info)(cls)


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
        self.max_value: float | None = None

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
        self.max_value = None

    def _track_min(self, x: Tensor) -> None:
        """Track the smallest and the largest value seen (an asymmetric range's ends)."""
        if not x.numel():
            return
        low, high = float(x.min()), float(x.max())
        self.min_value = low if self.min_value is None else min(self.min_value, low)
        self.max_value = high if self.max_value is None else max(self.max_value, high)

    def observed_range(self) -> tuple[float, float]:
        """[min, max] of what was seen, widened to hold 0 (a state made before the maximum
        was kept takes amax for it)."""
        if self.min_value is None:
            raise RuntimeError("calibration saw no data for this quantizer")
        high = self.max_value
        if high is None:  # a state made before the maximum was kept
            amax = self.compute_amax(8)
            high = float(amax.max()) if amax is not None else 0.0
        return min(self.min_value, 0.0), max(high, 0.0)

    def compute_range(self, num_bits: int) -> tuple[float, float]:
        """(low, high) of an asymmetric quantizer at `num_bits` (see the module's text)."""
        raise self.no_asymmetric_rule()

    def no_asymmetric_rule(self) -> UserError:
        return UserError(
            f"calibration.method {self.method!r} has no rule for asymmetric quantizers; "
            "choose max, percentile or mse, or set quantization.input.asymmetric false"
        )

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

    def compute_range(self, num_bits: int) -> tuple[float, float]:
        return self.observed_range()

    def state(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "axis": self.axis,
            "amax": self.amax,
            "min": self.min_value,
            "max": self.max_value,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> MaxCalibrator:
        calibrator = cls(state["axis"])
        calibrator.amax = state["amax"]
        calibrator.min_value = state["min"]
        calibrator.max_value = state.get("max")
        return calibrator


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
