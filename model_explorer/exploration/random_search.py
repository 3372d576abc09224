"""Random search (`exploration.algorithm: random`): the baseline a search algorithm must beat.

The first generation is the same first population the other algorithms start from (the
problem's own genomes, the strategy's spread ones, random ones); every later generation asks
for `n_offsprings` genomes drawn uniformly over the bounds whose configurations were never
evaluated (drawn in batches of `n_offsprings`, at most `ATTEMPTS` batches, as pymoo's mating
tries). Genomes are drawn from `numpy.random.default_rng(seed)` and nothing else, so a seeded
search is reproduced exactly; the population it keeps (what a result records as survivors)
is the best `pop_size` by NSGA-II's ranking, which never changes what is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pymoo.algorithms.base.genetic import GeneticAlgorithm
from pymoo.core.population import Population
from pymoo.core.repair import Repair
from pymoo.core.sampling import Sampling
from pymoo.operators.survival.rank_and_crowding import RankAndCrowding
from pymoo.util.display.multi import MultiObjectiveOutput

ATTEMPTS = 100


class RandomSearch(GeneticAlgorithm):
    """Fresh random configurations every generation, driven by ask/tell like the others."""

    def __init__(
        self,
        pop_size: int,
        n_offsprings: int,
        sampling: Sampling,
        random_sampling: Sampling,
        decode: Callable[[Sequence[float]], list[Any]],
        repair: Repair | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            pop_size=pop_size,
            n_offsprings=n_offsprings,
            sampling=sampling,
            survival=RankAndCrowding(),
            repair=repair,
            eliminate_duplicates=True,
            advance_after_initial_infill=True,
            output=MultiObjectiveOutput(),
            **kwargs,
        )
        self.random_sampling = random_sampling
        self.decode = decode
        self.evaluated: set[str] = set()
        self.draws: np.random.Generator | None = None

    def _setup(self, problem, **kwargs):  # noqa: ANN001, ANN202 - pymoo's signature
        # The draws have a generator of their own: survival's tie-breaks use random_state.
        self.draws = np.random.default_rng(self.seed)
        self.evaluated = set()

    def _initialize_infill(self) -> Population:
        return self.initialization.do(
            self.problem, self.pop_size, algorithm=self, random_state=self.draws
        )

    def _initialize_advance(self, infills=None, **kwargs):  # noqa: ANN001, ANN202
        self._remember(infills)
        super()._initialize_advance(infills=infills, **kwargs)

    def _infill(self) -> Population | None:
        fresh: list[Any] = []
        taken = set(self.evaluated)
        for _ in range(ATTEMPTS):
            drawn = self.random_sampling.do(
                self.problem, self.n_offsprings, random_state=self.draws
            )
            drawn = self.repair(self.problem, drawn, random_state=self.draws)
            for individual in drawn:
                key = self._key(individual.X)
                if key not in taken and len(fresh) < self.n_offsprings:
                    taken.add(key)
                    fresh.append(individual)
            if len(fresh) == self.n_offsprings:
                break
        if not fresh:  # every configuration drawn was evaluated: the space is spent
            self.termination.force_termination = True
            return None
        return Population.create(*fresh)

    def _advance(self, infills=None, **kwargs):  # noqa: ANN001, ANN202
        self._remember(infills)
        return super()._advance(infills=infills, **kwargs)

    def _remember(self, infills: Population | None) -> None:
        if infills is not None:
            self.evaluated.update(self._key(x) for x in infills.get("X"))

    def _key(self, genome: np.ndarray) -> str:
        return repr(self.decode(genome))
