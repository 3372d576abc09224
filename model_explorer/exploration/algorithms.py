"""Search algorithms (`exploration.algorithm`): the pymoo multi-objective algorithm that
proposes the genomes, built from the workload's Operators (made by exploration/operators.py).

- `nsga2` (default): NSGA-II, non-dominated sorting and crowding distance (pymoo's NSGA2;
  the golden files pin it).
- `nsga3`: NSGA-III, non-dominated sorting and niching around Das-Dennis reference
  directions (pymoo's NSGA3); meant for three or more objectives.
- `smsemoa`: SMS-EMOA, survival by least hypervolume contribution (pymoo's SMSEMOA).
- `agemoea`, `agemoea2`: AGE-MOEA and AGE-MOEA-II, survival by the front's estimated
  geometry (pymoo's AGEMOEA, AGEMOEA2; both need numba, the `agemoea` extra).
- `random`: random search over the same bounds, a baseline (exploration/random_search.py).

Each builder takes the Operators and its validated options and returns a pymoo algorithm that
the Explorer drives through ask/tell; every one draws its randomness from the seed pymoo's
`setup` gives it, so a replay from the seed asks for the same genomes. pymoo is imported by the
builders only: validating a workload never loads it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from model_explorer.errors import UserError
from model_explorer.schema.registry import Registry
from model_explorer.schema.specs import PositiveInt, Spec, TypedSpec

if TYPE_CHECKING:
    from pymoo.core.crossover import Crossover
    from pymoo.core.mutation import Mutation
    from pymoo.core.repair import Repair
    from pymoo.core.sampling import Sampling

DEFAULT = "nsga2"
KEY = "exploration.algorithm"


@contextmanager
def ties_in_seeded_order() -> Iterator[None]:
    """numpy's argsort stable while the algorithm ranks and selects (pymoo's ask and tell).

    pymoo breaks ties (equal constraint violations, which accuracies counted in samples often
    have; equal crowding distances, infinite at every front's two ends) with argsort's default
    quicksort, after a seeded permutation where it means them to fall at random. Quicksort's
    order of equal keys is the implementation's, and numpy's AVX-512, AVX2 and scalar sorts each
    order them otherwise: the same seed and the same measurements kept other survivors on
    another processor (the default workload, as it was then: hypervolume 0.4018 with numpy's
    AVX2 sort, 0.4381 without). A stable sort orders ties by the seeded permutation on every
    processor. Any order of equal keys is a correct quicksort's, so nothing else that sorts
    meanwhile is wrong."""
    import numpy as np

    unstable = np.argsort

    def argsort(a: Any, axis: int = -1, kind: str | None = None, order: Any = None) -> Any:
        return unstable(a, axis=axis, kind="stable", order=order)

    np.argsort = argsort
    try:
        yield
    finally:
        np.argsort = unstable


@dataclass(frozen=True)
class Operators:
    """What every algorithm is built from (made by `operators.make_operators`). `genetic()`
    holds the keywords pymoo's genetic algorithms share; `random_sampling` draws genomes
    uniformly over the bounds; `decode` gives the configuration a genome runs (duplicates are
    configurations, not genomes: float genes that decode alike are one candidate)."""

    pop_size: int
    n_offsprings: int
    n_obj: int
    sampling: Sampling
    random_sampling: Sampling
    crossover: Crossover
    mutation: Mutation
    repair: Repair | None
    decode: Callable[[Sequence[float]], list[Any]]

    def genetic(self) -> dict[str, Any]:
        return {
            "pop_size": self.pop_size,
            "n_offsprings": self.n_offsprings,
            "sampling": self.sampling,
            "crossover": self.crossover,
            "mutation": self.mutation,
            "repair": self.repair,
            "eliminate_duplicates": True,
        }


# A builder takes the Operators and the entry's validated options and returns a pymoo algorithm.
ALGORITHMS: Registry[Callable[[Operators, Any], Any]] = Registry("search algorithm")


class AlgorithmSpec(TypedSpec):
    """The algorithm that proposes genomes (`exploration.algorithm`): a registered algorithm
    and its options, e.g. `nsga3` or `{type: nsga3, partitions: 6}`."""

    registry: ClassVar[Registry[Any]] = ALGORITHMS
    type: str = DEFAULT
    """The algorithm: `nsga2`, `nsga3`, `smsemoa`, `agemoea`, `agemoea2` (these two need the
    `agemoea` extra) or `random`, a baseline; all but `nsga2` and `random` need two or more
    objectives. Its options sit beside `type` (only `nsga3` takes one, `partitions`)."""


def build_algorithm(spec: AlgorithmSpec, operators: Operators) -> Any:
    """The pymoo algorithm `spec` names, built from `operators`."""
    entry = ALGORITHMS.get(spec.type, f"{KEY}.type")
    check_available(spec)
    if operators.n_obj < 2 and needs_several_objectives(spec.type):
        raise UserError(f"{KEY}: {ONE_OBJECTIVE.format(name=spec.type)}")
    return entry.builder(operators, spec.options)


ONE_OBJECTIVE = (
    "{name} ranks candidates among several objectives and this search has one; choose nsga2 "
    "or random, or name more problem.objectives"
)


def needs_several_objectives(name: str) -> bool:
    entry = ALGORITHMS.lookup(name)
    return entry is not None and bool((entry.info or {}).get("several_objectives"))


def check_available(spec: AlgorithmSpec) -> None:
    """Refuse, in one sentence, an algorithm whose optional package is not installed."""
    info = ALGORITHMS.get(spec.type, f"{KEY}.type").info or {}
    needs, extra = info.get("needs"), info.get("extra")
    if needs is not None and importlib.util.find_spec(needs) is None:
        raise UserError(
            f"{KEY}: {spec.type} needs {needs}, which is not installed; install the "
            f"'{extra}' extra (pip install 'model_explorer[{extra}]') or choose another "
            "algorithm"
        )


class NSGA3Options(Spec):
    partitions: PositiveInt | None = None
    """Divisions of each objective's axis that place NSGA-III's Das-Dennis reference directions;
    when not given, the most whose directions do not outnumber `exploration.nsga.pop_size`
    (more directions than that are refused)."""


# Facts the builders' callers check: a package the entry imports (and the extra that installs
# it); whether it fails or means nothing with a single objective (pymoo's SMS-EMOA and
# AGE-MOEA-II raise on one, NSGA-III's reference directions need two axes).
SEVERAL = {"several_objectives": True}
NUMBA = {**SEVERAL, "needs": "numba", "extra": "agemoea"}


@ALGORITHMS.register("nsga2")
def _nsga2(operators: Operators, options: Any = None) -> Any:
    from pymoo.algorithms.moo.nsga2 import NSGA2

    return NSGA2(**operators.genetic())


@ALGORITHMS.register("nsga3", options=NSGA3Options, info=SEVERAL)
def _nsga3(operators: Operators, options: NSGA3Options) -> Any:
    from pymoo.algorithms.moo.nsga3 import NSGA3

    return NSGA3(reference_directions(operators, options.partitions), **operators.genetic())


def reference_directions(operators: Operators, partitions: int | None) -> Any:
    """Das-Dennis directions for the problem's objectives, no more than the population."""
    from pymoo.util.ref_dirs import get_reference_directions
    from pymoo.util.reference_direction import (
        get_number_of_uniform_points,
        get_partition_closest_to_points,
    )

    objectives, size = operators.n_obj, operators.pop_size
    if partitions is None:
        partitions = max(1, get_partition_closest_to_points(size, objectives))
    count = get_number_of_uniform_points(partitions, objectives)
    if count > size:
        raise UserError(
            f"{KEY}.partitions: {partitions} partitions give {count} reference directions for "
            f"{objectives} objectives, more than exploration.nsga.pop_size ({size}); lower "
            "partitions or raise pop_size"
        )
    return get_reference_directions("das-dennis", objectives, n_partitions=partitions)


@ALGORITHMS.register("smsemoa", info=SEVERAL)
def _smsemoa(operators: Operators, options: Any = None) -> Any:
    from pymoo.algorithms.moo.sms import SMSEMOA

    return SMSEMOA(**operators.genetic())


@ALGORITHMS.register("agemoea", info=NUMBA)
def _agemoea(operators: Operators, options: Any = None) -> Any:
    from pymoo.algorithms.moo.age import AGEMOEA

    return AGEMOEA(**operators.genetic())


@ALGORITHMS.register("agemoea2", info=NUMBA)
def _agemoea2(operators: Operators, options: Any = None) -> Any:
    from pymoo.algorithms.moo.age2 import AGEMOEA2

    return AGEMOEA2(**operators.genetic())


@ALGORITHMS.register("random")
def _random(operators: Operators, options: Any = None) -> Any:
    from model_explorer.exploration.random_search import RandomSearch

    return RandomSearch(
        pop_size=operators.pop_size,
        n_offsprings=operators.n_offsprings,
        sampling=operators.sampling,
        random_sampling=operators.random_sampling,
        repair=operators.repair,
        decode=operators.decode,
    )
