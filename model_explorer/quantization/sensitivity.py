"""One-at-a-time sensitivity of a QuantizedModel's quantizers, and the bit allocations built
from it that seed a search (`exploration.initialization: sensitivity`)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_explorer.metrics.functions import higher_is_better, score


@dataclass
class Row:
    """One quantizer's score alone and its `drop`: the damage against the float model, in the
    metric's units and positive when worse (accuracy lost, or kl gained)."""

    name: str
    accuracy: float
    drop: float


def damage(baseline: float, accuracy: float, higher: bool) -> float:
    """How much worse than the float model's `baseline` a score is, in the metric's units and
    positive when worse (accuracy lost where `higher` is better, divergence gained else)."""
    return baseline - accuracy if higher else accuracy - baseline


@dataclass
class SensitivityTable:
    """Accuracy of the model with only one quantizer on at `bits`, per quantizer; `higher`:
    whether the metric is better higher (top-1) or lower (kl)."""

    baseline: float
    bits: int
    rows: list[Row]
    higher: bool = True

    def damage(self, accuracy: float) -> float:
        """How much worse than the float model `accuracy` is (positive when worse)."""
        return damage(self.baseline, accuracy, self.higher)

    def ranked(self) -> list[Row]:
        """Most sensitive first (ties keep the model's order)."""
        return sorted(self.rows, key=lambda row: -row.drop)

    def resolution(self) -> float | None:
        """The smallest positive drop: what the table can resolve (one sample of accuracy for
        top-1), None when no drop is positive."""
        return min((row.drop for row in self.rows if row.drop > 0), default=None)

    def to_plain(self) -> dict[str, Any]:
        """The table as plain data (a result file keeps it: a resumed search reads it back)."""
        rows = [[row.name, row.accuracy, row.drop] for row in self.rows]
        return {"baseline": self.baseline, "bits": self.bits, "rows": rows, "higher": self.higher}

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> SensitivityTable:
        rows = [Row(name, accuracy, drop) for name, accuracy, drop in data["rows"]]
        return cls(data["baseline"], data["bits"], rows, data["higher"])

    def drops(self) -> dict[str, float]:
        return {row.name: round(row.drop, 6) for row in self.rows}

    def to_csv(self, path: str | Path) -> None:
        with open(path, "w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["rank", "quantizer", "bits", "accuracy", "drop"])
            for rank, row in enumerate(self.ranked(), 1):
                writer.writerow(
                    [rank, row.name, self.bits, f"{row.accuracy:.6f}", f"{row.drop:.6f}"]
                )

    def bits_within(
        self,
        model: Any,
        batches: Iterable[Any],
        metric: Any,
        name: str,
        drop: float,
        bit_range: tuple[int, int],
    ) -> int:
        """The smallest bit width in `bit_range` at which quantizer `name` alone costs at most
        `drop` accuracy (the range's top when none does)."""
        low, high = bit_range
        for bits in range(low, high + 1):
            if self.damage(_alone(model, batches, metric, name, bits)) <= drop:
                return bits
        return high


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values))


def _alone(
    model: Any, batches: Iterable[Any], metric: Any, name: str | None, setting: int | str
) -> float:
    """Accuracy with only quantizer `name` on at `setting`, a bit width or a format's short
    name (None: every quantizer off)."""
    with model.preserved_settings():
        model.set_enabled(False)
        if name is not None:
            quantizer = model.quantizers[name]
            if isinstance(setting, str):
                quantizer.format = setting
            else:
                quantizer.num_bits = setting
            quantizer.enabled = True
        return _mean(score(model, batches, metric).accuracies)


def layer_sensitivity(
    model: Any,
    batches: Iterable[Any],
    metric: Any,
    bits: int,
    names: Iterable[str] | None = None,
    baseline: float | None = None,
) -> SensitivityTable:
    """Per quantizer of `model` (a calibrated QuantizedModel, in `explorable_modules` order;
    only `names` when given), the accuracy with only it on at `bits`; a multi-output model
    counts the mean accuracy. `baseline`: the accuracy with every quantizer off, when already
    measured (it does not depend on `bits`)."""
    if baseline is None:
        baseline = _alone(model, batches, metric, None, bits)
    wanted = None if names is None else set(names)
    table = SensitivityTable(baseline, bits, [], higher_is_better(metric))
    for name in model.explorable_modules:
        if wanted is None or name in wanted:
            accuracy = _alone(model, batches, metric, name, bits)
            table.rows.append(Row(name, accuracy, table.damage(accuracy)))
    return table


# A drop at a second width is used where it is at least this many times the table's
# resolution (its smallest positive drop: one sample for top-1), so that a ratio of two drops
# is not one of two counts of a sample or two; the rate it gives is kept between these bounds
# per bit (2: the error's amplitude halves with each bit, 4: its power, the noise model).
RESOLVED = 4.0
RATE_BOUNDS = (2.0, 4.0)


def resolvable(table: SensitivityTable) -> list[str]:
    """The quantizers whose drop at a wider width could be resolved: those whose drop at
    `table.bits` is at least RESOLVED times the table's resolution (a drop falls as bits
    rise, so the others' would not be)."""
    resolution = table.resolution()
    if resolution is None:
        return []
    return [row.name for row in table.rows if row.drop >= RESOLVED * resolution]


def decay_rates(table: SensitivityTable, wider: SensitivityTable) -> list[float]:
    """Per quantizer of `table`, the factor by which its accuracy drop falls per bit, from its
    drops at `table.bits` and `wider.bits`: (d_low / d_wide) ** (1 / bits apart), within
    RATE_BOUNDS, where `wider` has the quantizer with a drop of at least RESOLVED times the
    table's resolution; elsewhere 4, the noise model (quantization noise power falls by 4 per
    bit). Measured rates matter where a quantizer's error is not noise-like: an activation
    quantizer with outliers whose clipping error stays as the bits rise (on MiniLM the drops
    of its input quantizers fall by 1.5-3 per bit between 4 and 6 bits, those of its weights
    by about 4)."""
    resolution, apart = table.resolution(), wider.bits - table.bits
    wide = {row.name: row.drop for row in wider.rows}
    low, high = RATE_BOUNDS
    rates = []
    for row in table.rows:
        drop = wide.get(row.name, 0.0)
        if resolution is None or apart <= 0 or row.drop <= 0 or drop < RESOLVED * resolution:
            rates.append(4.0)
        else:
            rates.append(min(max((row.drop / drop) ** (1.0 / apart), low), high))
    return rates


def allocation_path(
    table: SensitivityTable,
    bounds: Sequence[tuple[int, int]],
    weights: Sequence[float] | None = None,
    rates: Sequence[float] | None = None,
) -> list[list[int]]:
    """Greedy bit allocation from every quantizer at its upper bound down to every one at its
    lower bound, one bit at a time: each step lowers the quantizer whose estimated accuracy
    loss per unit of cost saved is least. A quantizer's loss at b bits is estimated from its
    table drop d (measured at `table.bits`) as d * r**(table.bits - b), r its rate (`rates`,
    see `decay_rates`; 4 when None: quantization noise power falls by 4 with every bit), so
    lowering it from b to b - 1 costs d * r**(table.bits - b) * (r - 1), and with r = 4 the
    quantizers end near `0.5 * log2(d)` bits apart, the sensitive ones highest (reverse
    water-filling; with equal costs per bit every point of the path is the optimum of this
    separable convex estimate for its total bits). `weights`: each quantizer's cost per bit (1
    each when None). A drop at or below zero is below what the table resolves, not no
    loss: it counts as half the smallest positive drop (one sample of accuracy, usually), so
    that many such quantizers lowered together are not taken as free (on ResNet-20 the path
    keeps the minimum accuracy down to 4.4 bits per quantizer; counted as 1/100 of it, most
    points below 5.5 bits miss it). Ties keep the model's order. Returns the configurations
    along the path (the all-upper start excluded)."""
    floor = (table.resolution() or 1.0) / 2
    drops = [max(row.drop, floor) for row in table.rows]
    weights = [1.0] * len(bounds) if weights is None else list(weights)
    rates = [4.0] * len(bounds) if rates is None else list(rates)
    current = [high for _, high in bounds]
    path = []
    while True:
        lowerable = [i for i, (low, _) in enumerate(bounds) if current[i] > low]
        if not lowerable:
            return path
        i = min(
            lowerable,
            key=lambda j: (
                _step_loss(drops[j], rates[j], table.bits - current[j]) / max(weights[j], 1e-12),
                j,
            ),
        )
        current[i] -= 1
        path.append(list(current))


def _step_loss(drop: float, rate: float, below: int) -> float:
    """Estimated loss of one bit less at `below` bits under the table's width."""
    return drop * rate**below * (rate - 1.0)


def last_accepted(path: Sequence[Any], accepts: Callable[[Any], bool]) -> int:
    """The index of the last point of `path` that `accepts` takes, by bisection, for a path
    along which acceptance stops once (accuracy falling as the bits do): about log2(len(path))
    calls. -1 when it takes none."""
    taken, refused = -1, len(path)
    while refused - taken > 1:
        middle = (taken + refused) // 2
        if accepts(path[middle]):
            taken = middle
        else:
            refused = middle
    return taken


def spread(configurations: list[list[int]], count: int) -> list[list[int]]:
    """`count` configurations evenly spaced along a path (all of them when fewer)."""
    if count >= len(configurations):
        return list(configurations)
    if count <= 0:
        return []
    if count == 1:
        return [configurations[len(configurations) // 2]]
    step = (len(configurations) - 1) / (count - 1)
    return [configurations[round(i * step)] for i in range(count)]
