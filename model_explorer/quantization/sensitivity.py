"""One-at-a-time sensitivity of a QuantizedModel's quantizers, and the greedy configurations
built from it that seed a search (`exploration.initialization: sensitivity`)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
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


def greedy_configurations(
    table: SensitivityTable, bounds: Sequence[tuple[int, int]]
) -> list[list[int]]:
    """A greedy path from every quantizer at its upper bound down to every one at its lower
    bound, lowering the least sensitive quantizers first: first each in turn to the middle of
    its range, then each in turn to its lower bound. `bounds` are per quantizer, in the table's
    order. Returns the configurations along the path (the all-upper start excluded)."""
    order = sorted(range(len(table.rows)), key=lambda i: (table.rows[i].drop, i))
    current = [high for _, high in bounds]
    path = []
    for level in ("middle", "lower"):
        for i in order:
            low, high = bounds[i]
            target = (low + high) // 2 if level == "middle" else low
            if current[i] != target:
                current[i] = target
                path.append(list(current))
    return path


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
