"""Precision repair: the cheapest set of quantizers to raise so that an individual reaches a
target accuracy, found by measurement as Polygraphy's `debug precision` finds the layers to
run at higher precision: the quantizers ranked by what raising each alone gains per unit of
cost, a bisection for the shortest prefix of that ranking that, raised to the widest choice
its gene allows, reaches the target, then a greedy pass that gives back, one step of the gene
at a time and the most expensive first, what the target does not need.

Genes are indices into each quantizer's choices (a bit width, or a format's position among
the choices, cheapest first), so "wider" is "higher" for both."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

Genome = tuple[int, ...]


@dataclass
class Repair:
    """What a repair found: the repaired genome and its accuracy and cost, every measurement it
    took (genome -> accuracy), and the order it ranked the quantizers in."""

    parent: Genome
    genome: Genome
    accuracy: float
    cost: float
    measured: dict[Genome, float] = field(default_factory=dict)
    ranking: list[int] = field(default_factory=list)

    @property
    def raised(self) -> list[int]:
        return [i for i, (a, b) in enumerate(zip(self.parent, self.genome, strict=True)) if b > a]

    @property
    def evaluations(self) -> int:
        return len(self.measured)


class AlreadyMeets(Exception):
    """The individual reaches the target as it is."""

    def __init__(self, accuracy: float) -> None:
        super().__init__(accuracy)
        self.accuracy = accuracy


class Unreachable(Exception):
    """Not even every quantizer at its widest choice reaches the target."""

    def __init__(self, accuracy: float) -> None:
        super().__init__(accuracy)
        self.accuracy = accuracy


class _Search:
    def __init__(
        self,
        measure: Callable[[Genome], float],
        cost: Callable[[Genome], float],
        target: float,
        higher: bool,
    ) -> None:
        self.measure, self.cost, self.target, self.higher = measure, cost, target, higher
        self.measured: dict[Genome, float] = {}

    def accuracy(self, genome: Genome) -> float:
        if genome not in self.measured:
            self.measured[genome] = self.measure(genome)
        return self.measured[genome]

    def meets(self, genome: Genome) -> bool:
        value = self.accuracy(genome)
        return value >= self.target if self.higher else value <= self.target


def _raise(genome: Genome, upper: Sequence[int], indices: Sequence[int]) -> Genome:
    raised = list(genome)
    for i in indices:
        raised[i] = upper[i]
    return tuple(raised)


def repair(
    measure: Callable[[Genome], float],
    cost: Callable[[Genome], float],
    parent: Sequence[int],
    upper: Sequence[int],
    target: float,
    higher: bool = True,
) -> Repair:
    """The repair of `parent` (gene indices, each at most `upper`) to `target`: `measure`
    gives a genome's accuracy (higher is better unless `higher` is False), `cost` its cost in
    the objective the repair keeps low. Raises AlreadyMeets or Unreachable."""
    search = _Search(measure, cost, target, higher)
    parent = tuple(int(g) for g in parent)
    if search.meets(parent):
        raise AlreadyMeets(search.accuracy(parent))
    candidates = [i for i, gene in enumerate(parent) if gene < upper[i]]
    if not search.meets(_raise(parent, upper, candidates)):
        raise Unreachable(search.accuracy(_raise(parent, upper, candidates)))
    ranking = _ranking(search, parent, upper, candidates)
    low, high = 1, len(ranking)  # the shortest prefix that meets lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        if search.meets(_raise(parent, upper, ranking[:middle])):
            high = middle
        else:
            low = middle + 1
    genome = _give_back(search, parent, _raise(parent, upper, ranking[:high]))
    return Repair(
        parent, genome, search.accuracy(genome), cost(genome), dict(search.measured), ranking
    )


def _ranking(
    search: _Search, parent: Genome, upper: Sequence[int], candidates: list[int]
) -> list[int]:
    """The candidates by what raising each alone gains per unit of cost, most first (the
    larger gain first where the cost is the same)."""
    base, base_cost = search.accuracy(parent), search.cost(parent)
    sign = 1 if search.higher else -1

    def key(i: int) -> tuple[float, float]:
        raised = _raise(parent, upper, [i])
        gain = sign * (search.accuracy(raised) - base)
        return gain / max(search.cost(raised) - base_cost, 1e-12), gain

    return sorted(candidates, key=key, reverse=True)


def _give_back(search: _Search, parent: Genome, genome: Genome) -> Genome:
    """Lower each raised gene one step at a time towards the parent's while the target holds,
    the genes whose step saves most first."""
    current = list(genome)

    def saving(i: int) -> float:
        lower = list(current)
        lower[i] -= 1
        return search.cost(tuple(current)) - search.cost(tuple(lower))

    for i in sorted(
        [i for i in range(len(parent)) if current[i] > parent[i]], key=saving, reverse=True
    ):
        while current[i] > parent[i]:
            trial = list(current)
            trial[i] -= 1
            if not search.meets(tuple(trial)):
                break
            current = trial
    return tuple(current)
