"""The sensitivity start of a formats search (`problem.choices`): per quantizer, the damage of
each format it may take with only it quantized (one forward pass of the exploration data per
quantizer and format), and the allocation path from every quantizer at its dearest format to
every one at its cheapest. Each quantizer moves along the lower convex hull of its (cost,
damage) points, so a format that costs more and damages more than another is never chosen, and
the path takes the move with the least damage per unit of cost saved first, over all
quantizers (the bit-width start's greedy, sensitivity.allocation_path, with measured damage at
every choice in place of a decay model)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from model_explorer.metrics.functions import higher_is_better
from model_explorer.quantization.sensitivity import _alone, damage


@dataclass
class FormatTable:
    """The float model's score and, per quantizer and format, the damage with only that
    quantizer on in that format (positive when worse, in the metric's units)."""

    baseline: float
    higher: bool = True
    drops: dict[str, dict[str, float]] = field(default_factory=dict)

    def damage(self, accuracy: float) -> float:
        return damage(self.baseline, accuracy, self.higher)

    def resolution(self) -> float | None:
        """The smallest positive damage: what the table can resolve."""
        return min((d for row in self.drops.values() for d in row.values() if d > 0), default=None)

    def to_plain(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "higher": self.higher, "drops": self.drops}

    @classmethod
    def from_plain(cls, data: dict[str, Any]) -> FormatTable:
        return cls(data["baseline"], data["higher"], {k: dict(v) for k, v in data["drops"].items()})


def format_sensitivity(
    model: Any,
    batches: Iterable[Any],
    metric: Any,
    choices: dict[str, Sequence[str]],
    table: FormatTable | None = None,
    keep: Any = None,
) -> FormatTable:
    """Per quantizer of `choices` (name -> its formats), the damage of each format with only
    it on; `table`: what is measured already (kept rows are not measured again); `keep` is
    called with the table after each quantizer, so that an interrupted measurement loses at
    most one quantizer's."""
    if table is None:
        table = FormatTable(_alone(model, batches, metric, None, 8), higher_is_better(metric))
    for name, formats in choices.items():
        if name in table.drops:
            continue
        table.drops[name] = {
            spelling: table.damage(_alone(model, batches, metric, name, spelling))
            for spelling in formats
        }
        if keep is not None:
            keep(table)
    return table


def hull(costs: Sequence[float], damages: Sequence[float]) -> tuple[int, list[tuple[float, int]]]:
    """A quantizer's start (its dearest choice, the least damaging among equals) and its moves
    along the lower convex hull of (cost, damage) towards the cheapest: (damage added per unit
    of cost saved, the choice moved to), the slopes rising."""
    order = sorted(range(len(costs)), key=lambda i: (-costs[i], damages[i], i))
    current, moves = order[0], []
    while True:
        cheaper = [i for i in range(len(costs)) if costs[i] < costs[current]]
        if not cheaper:
            return order[0], moves
        slope = {i: (damages[i] - damages[current]) / (costs[current] - costs[i]) for i in cheaper}
        chosen = min(cheaper, key=lambda i: (slope[i], -costs[i], i))
        moves.append((slope[chosen], chosen))
        current = chosen


def format_path(
    table: FormatTable,
    names: Sequence[str],
    costs: Sequence[Sequence[float]],
    bits: Sequence[Sequence[float]],
) -> tuple[list[int], list[list[int]]]:
    """The start (every quantizer at its dearest choice) and the configurations along the
    allocation path (choice indices per quantizer, the start excluded). `costs[i][j]`: what
    quantizer i at its choice j costs of the first cost objective; `bits[i][j]`: its bits per
    element. A damage at or below what the table resolves is not taken as none: it counts as
    half the smallest positive damage at the quantizer's cheapest choice, falling by 4 per bit
    above it (quantization noise power), so that unresolved moves are not free."""
    floor = (table.resolution() or 1.0) / 2
    starts, moves = [], []
    for name, cost, width in zip(names, costs, bits, strict=True):
        lowest = min(width)
        damages = [
            max(table.drops[name][spelling], floor * 4.0 ** (lowest - width[j]))
            for j, spelling in enumerate(table.drops[name])
        ]
        start, steps = hull(cost, damages)
        starts.append(start)
        moves.append(steps)
    current, path, taken = list(starts), [], [0] * len(names)
    while True:
        ready = [i for i in range(len(names)) if taken[i] < len(moves[i])]
        if not ready:
            return starts, path
        i = min(ready, key=lambda q: (moves[q][taken[q]][0], q))
        current[i] = moves[i][taken[i]][1]
        taken[i] += 1
        path.append(list(current))
