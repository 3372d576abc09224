"""The workload's `exploration:` settings: the search itself (its algorithm, NSGA-II by default,
the population and operators under `nsga:`, the strategy, the first population), its data and
where candidates are evaluated (runner)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model_explorer.datasets.spec import DatasetSpec
from model_explorer.exploration.algorithms import AlgorithmSpec
from model_explorer.exploration.runners.base import RunnerSpec
from model_explorer.exploration.strategies import StrategySpec
from model_explorer.schema.specs import Fraction, PositiveFloat, PositiveInt, Spec


class NSGASpec(Spec):
    """The population and variation operators of every algorithm, whatever its name says."""

    pop_size: PositiveInt = 15
    """Individuals in the first population and kept after each generation."""
    offsprings: PositiveInt | None = None
    """Offspring per generation (`pop_size` when not given); under the `surrogate` strategy the
    algorithm proposes `strategy.candidates` and `evaluations` of them are scored."""
    generations: PositiveInt = 30
    """Generations after the first population."""
    mutation_eta: PositiveFloat = 10.0
    """Distribution index of polynomial mutation: larger, smaller steps."""
    mutation_prob: Fraction = 1.0
    """Probability that an offspring is mutated."""
    crossover_eta: PositiveFloat = 5.0
    """Distribution index of simulated binary crossover: larger, children nearer their parents."""
    crossover_prob: Fraction = 1.0
    """Probability that two parents are crossed."""


class ExplorationDatasets(Spec):
    """The data candidates are scored on."""

    exploration: DatasetSpec
    """What every candidate is scored on (a dataset spec)."""
    baseline: DatasetSpec | None = None
    """What the float model's accuracy is measured on, for `allowable_accuracy_drop` (the
    exploration data when not given)."""


class ExplorationSpec(Spec):
    """The search's own settings; what is searched (the problem, its objectives, constraint and
    gene limits) is the `problem:` section's."""

    nsga: NSGASpec = Field(default_factory=NSGASpec)
    """The population and operators."""
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    """The pymoo algorithm that proposes candidates: `nsga2`, `nsga3`, `smsemoa`, `agemoea`,
    `agemoea2` or `random`, a name or `{type: nsga3, partitions: 4}`."""
    strategy: StrategySpec = Field(default_factory=StrategySpec)
    """How the search spends its sample-forwards: `nsga2`, `spread`, `multifidelity` or
    `surrogate`, a name or `{type: surrogate, candidates: 64, ...}`."""
    initialization: Literal["auto", "random", "sensitivity"] = "auto"
    """`sensitivity`: half the first population from an allocation by the one-at-a-time
    sensitivity of each quantizer (bit widths or formats); `random`: none of it; `auto`:
    `sensitivity` where the problem can seed, the algorithm is not `random` and the genome has
    more genes than `nsga.pop_size` (where the start was measured to pay), else `random`."""
    datasets: ExplorationDatasets
    """The data candidates are scored on."""
    runner: RunnerSpec = Field(default_factory=RunnerSpec)
    """Where candidates are evaluated: `serial`, `processes` or `dask`, with their options."""
