"""The pymoo operators every search algorithm is built from (`algorithms.Operators`): the
first population (the problem's own genomes, spread ones, random ones), SBX and polynomial
mutation with the workload's `nsga:` settings, integer rounding and the sizes of a
generation."""

from __future__ import annotations

import itertools
import math

import numpy as np
from pymoo.core.repair import Repair
from pymoo.core.sampling import Sampling
from pymoo.operators.crossover.sbx import SBX
from pymoo.operators.mutation.pm import PM
from pymoo.operators.repair.rounding import RoundingRepair
from pymoo.operators.sampling.rnd import FloatRandomSampling, IntegerRandomSampling

from model_explorer.exploration.algorithms import Operators
from model_explorer.exploration.spec import NSGASpec
from model_explorer.exploration.strategies import Strategy, spread_genomes
from model_explorer.problems.base import Problem


class SeededSampling(Sampling):
    """The problem's own starting genomes first, random ones for the rest of the population."""

    def __init__(self, genomes: list[list[float]], random: Sampling) -> None:
        super().__init__()
        self.genomes = np.array(genomes, dtype=float).reshape(len(genomes), -1)
        self.random = random

    def _do(self, problem, n_samples, **kwargs):  # noqa: ANN001, ANN202 - pymoo's signature
        rest = max(0, n_samples - len(self.genomes))
        sampled = self.random._do(problem, rest, **kwargs) if rest else np.empty((0, problem.n_var))
        return np.vstack([self.genomes[:n_samples], sampled])


class IntegerGenes(Repair):
    """Rounds the integer genes of a mixed genome (bit widths beside float thresholds)."""

    def __init__(self, mask: list[bool]) -> None:
        super().__init__()
        self.mask = np.array(mask, dtype=bool)

    def _do(self, problem, X, **kwargs):  # noqa: ANN001, ANN202, N803 - pymoo's signature
        X[:, self.mask] = np.round(X[:, self.mask])
        return X


def whole_space(problem: Problem, limit: int) -> list[list[float]] | None:
    """Every genome of an all-integer problem whose space holds at most `limit` configurations
    (the first population is then the whole space, each configuration once), else None."""
    if not all(v.integer for v in problem.variables):
        return None
    ranges = [range(int(v.lower), int(v.upper) + 1) for v in problem.variables]
    if math.prod(len(r) for r in ranges) > limit:
        return None
    return [[float(g) for g in genome] for genome in itertools.product(*ranges)]


def make_operators(
    problem: Problem, nsga: NSGASpec, strategy: Strategy | None = None, seed: int = 0
) -> Operators:
    """The workload's operators: SBX crossover and polynomial mutation with their eta and
    probability, integer rounding for integer genes; the problem's own starting genomes first,
    then (`strategy.spread_start`) genomes spread along the cost axis, random ones for the
    rest."""
    integer = [v.integer for v in problem.variables]
    if all(integer):
        operator_repair, algorithm_repair = RoundingRepair(), None
        random_sampling: Sampling = IntegerRandomSampling()
    else:
        operator_repair = None
        algorithm_repair = IntegerGenes(integer) if any(integer) else None
        random_sampling = FloatRandomSampling()
    initial = whole_space(problem, nsga.pop_size) or problem.initial_genomes()
    if strategy is not None and strategy.spread_start and len(initial) < nsga.pop_size:
        initial += spread_genomes(
            np.array([v.lower for v in problem.variables], dtype=float),
            np.array([v.upper for v in problem.variables], dtype=float),
            np.array(integer, dtype=bool),
            nsga.pop_size - len(initial),
            seed,
        )
    return Operators(
        pop_size=nsga.pop_size,
        n_offsprings=nsga.offsprings or nsga.pop_size,
        n_obj=len(problem.objectives),
        sampling=SeededSampling(initial, random_sampling) if initial else random_sampling,
        random_sampling=random_sampling,
        crossover=SBX(
            prob=nsga.crossover_prob, eta=nsga.crossover_eta, vtype=float, repair=operator_repair
        ),
        mutation=PM(
            prob=nsga.mutation_prob, eta=nsga.mutation_eta, vtype=float, repair=operator_repair
        ),
        repair=algorithm_repair,
        decode=problem.decode,
    )
