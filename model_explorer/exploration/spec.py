"""The workload's `exploration:` settings: the search itself (its algorithm, NSGA-II by default,
the population and operators under `nsga:`, the strategy, the first population), its data and
where candidates are evaluated (runner)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model_explorer.datasets.base import DatasetSpec
from model_explorer.exploration.algorithms import AlgorithmSpec
from model_explorer.exploration.runners.base import RunnerSpec
from model_explorer.exploration.strategies import StrategySpec
from model_explorer.schema import Fraction, PositiveFloat, PositiveInt, Spec


class NSGASpec(Spec):
    pop_size: PositiveInt = 15
    offsprings: PositiveInt | None = None
    generations: PositiveInt = 30
    mutation_eta: PositiveFloat = 10.0
    mutation_prob: Fraction = 1.0
    crossover_eta: PositiveFloat = 5.0
    crossover_prob: Fraction = 1.0


class ExplorationDatasets(Spec):
    exploration: DatasetSpec
    baseline: DatasetSpec | None = None


class ExplorationSpec(Spec):
    """The search's own settings; what is searched (the problem, its objectives, constraint and
    gene limits) is the `problem:` section's."""

    nsga: NSGASpec = Field(default_factory=NSGASpec)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    strategy: StrategySpec = Field(default_factory=StrategySpec)
    # sensitivity: half the first population comes from an allocation by the one-at-a-time
    # sensitivity of each quantizer (problems whose genes are bit widths or formats); random:
    # none of it; auto: sensitivity where the problem can seed and the algorithm is not random.
    initialization: Literal["auto", "random", "sensitivity"] = "auto"
    datasets: ExplorationDatasets
    runner: RunnerSpec = Field(default_factory=RunnerSpec)
