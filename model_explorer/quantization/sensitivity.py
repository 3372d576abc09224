"""One-at-a-time sensitivity of a QuantizedModel's quantizers, and the bit allocations built
from it that seed a search (`exploration.initialization: sensitivity`)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_explorer.metrics import score


@dataclass
class Row:
    name: str
    accuracy: float
    drop: float


@dataclass
class SensitivityTable:
    """Accuracy of the model with only one quantizer on at `bits`, per quantizer."""

    baseline: float
    bits: int
    rows: list[Row]

    def ranked(self) -> list[Row]:
        """Most sensitive first (ties keep the model's order)."""
        return sorted(self.rows, key=lambda row: -row.drop)

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
            if self.baseline - _alone(model, batches, metric, name, bits) <= drop:
                return bits
        return high


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values))


def _alone(model: Any, batches: Iterable[Any], metric: Any, name: str | None, bits: int) -> float:
    """Accuracy with only quantizer `name` on at `bits` (None: every quantizer off)."""
    with model.preserved_settings():
        model.set_enabled(False)
        if name is not None:
            quantizer = model.quantizers[name]
            quantizer.num_bits = bits
            quantizer.enabled = True
        return _mean(score(model, batches, metric).accuracies)


def layer_sensitivity(
    model: Any, batches: Iterable[Any], metric: Any, bits: int
) -> SensitivityTable:
    """Per quantizer of `model` (a calibrated QuantizedModel, in `explorable_modules` order),
    the accuracy with only it on at `bits`; a multi-output model counts the mean accuracy."""
    baseline = _alone(model, batches, metric, None, bits)
    rows = []
    for name in model.explorable_modules:
        accuracy = _alone(model, batches, metric, name, bits)
        rows.append(Row(name, accuracy, baseline - accuracy))
    return SensitivityTable(baseline, bits, rows)


def allocation_path(
    table: SensitivityTable,
    bounds: Sequence[tuple[int, int]],
    weights: Sequence[float] | None = None,
) -> list[list[int]]:
    """Greedy bit allocation from every quantizer at its upper bound down to every one at its
    lower bound, one bit at a time: each step lowers the quantizer whose estimated accuracy
    loss per unit of cost saved is least. A quantizer's loss at b bits is estimated from its
    table drop d (measured at `table.bits`) as d * 4**(table.bits - b): quantization noise
    power falls by 4 with every bit, so lowering it from b to b - 1 costs 3 * d * 4**(table.bits
    - b), and the quantizers end near `0.5 * log2(d)` bits apart, the sensitive ones highest
    (reverse water-filling; with equal costs per bit every point of the path is the optimum of
    this separable convex estimate for its total bits). `weights`: each quantizer's cost per
    bit (1 each when None). A drop at or below zero is below what the table resolves, not no
    loss: it counts as half the smallest positive drop (one sample of accuracy, usually), so
    that many such quantizers lowered together are not taken as free (on ResNet-20 the path
    keeps the minimum accuracy down to 4.4 bits per quantizer; counted as 1/100 of it, most
    points below 5.5 bits miss it). Ties keep the model's order. Returns the configurations
    along the path (the all-upper start excluded)."""
    drops = [row.drop for row in table.rows]
    positive = [d for d in drops if d > 0]
    floor = (min(positive) if positive else 1.0) / 2
    drops = [max(d, floor) for d in drops]
    weights = [1.0] * len(bounds) if weights is None else list(weights)
    current = [high for _, high in bounds]
    path = []
    while True:
        lowerable = [i for i, (low, _) in enumerate(bounds) if current[i] > low]
        if not lowerable:
            return path
        i = min(
            lowerable,
            key=lambda j: (drops[j] * 4.0 ** (table.bits - current[j]) / max(weights[j], 1e-12), j),
        )
        current[i] -= 1
        path.append(list(current))


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
