"""The workload's `exploration:` settings: the search (its algorithm, NSGA-II by default, its
sizes and operators under `nsga:`, its strategy), its objectives and constraint,
the bit and threshold limits of the genes (`extra_args`), its data, energy and runner."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from model_explorer.cost.energy.base import EnergyEvaluationSpec
from model_explorer.datasets.base import DatasetSpec
from model_explorer.exploration.algorithms import (
    ONE_OBJECTIVE,
    AlgorithmSpec,
    needs_several_objectives,
)
from model_explorer.exploration.runners.base import RunnerSpec
from model_explorer.exploration.strategies import StrategySpec
from model_explorer.schema import (
    Bits,
    Fraction,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Spec,
)


class NSGASpec(Spec):
    """Sizes and operator settings of the search, whichever its algorithm (`nsga:`, the
    original tool's name)."""

    pop_size: PositiveInt = 15
    offsprings: PositiveInt | None = None
    generations: PositiveInt = 30
    mutation_eta: PositiveFloat = 10.0
    mutation_prob: Fraction = 1.0
    crossover_eta: PositiveFloat = 5.0
    crossover_prob: Fraction = 1.0


class ExtraArgs(Spec):
    num_bits_lower_limit: Bits = 4
    num_bits_upper_limit: Bits = 14
    bit_weighting_function: Literal["bits_weighted_linear", "bits_weighted_per_layer"] = (
        "bits_weighted_linear"
    )
    discrete_threshold_steps: PositiveInt = 20
    discrete_threshold_method: Literal["linear", "log"] = "linear"
    threshold_limit: PositiveFloat = 1.0
    block_size: tuple[PositiveInt, PositiveInt] = (8, 8)

    @model_validator(mode="after")
    def _ordered_limits(self) -> ExtraArgs:
        if self.num_bits_lower_limit > self.num_bits_upper_limit:
            raise PydanticCustomError(
                "limits_order",
                "num_bits_lower_limit ({low}) is above num_bits_upper_limit ({high})",
                {"low": self.num_bits_lower_limit, "high": self.num_bits_upper_limit},
            )
        return self


class ExplorationDatasets(Spec):
    exploration: DatasetSpec
    baseline: DatasetSpec | None = None


class ExplorationSpec(Spec):
    nsga: NSGASpec = Field(default_factory=NSGASpec)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    strategy: StrategySpec = Field(default_factory=StrategySpec)
    objectives: list[str] | None = None  # None: the problem's default
    early_reject: bool = True
    # sensitivity: half the first population comes from the one-at-a-time sensitivity of each
    # quantizer (quantization problems); random: all of it is random.
    initialization: Literal["random", "sensitivity"] = "random"
    layer_bounds: dict[str, tuple[Bits, Bits]] = Field(default_factory=dict)
    minimum_accuracy: Fraction | list[Fraction] | None = None
    allowable_accuracy_drop: Fraction | None = None
    # The bound of a metric where lower is better (kl): the largest value a candidate may have.
    maximum_divergence: NonNegativeFloat | None = None
    predefined_parameters: list[NonNegativeFloat] = Field(default_factory=list)
    datasets: ExplorationDatasets
    energy_evaluation: EnergyEvaluationSpec | None = None
    extra_args: ExtraArgs = Field(default_factory=ExtraArgs)
    runner: RunnerSpec = Field(default_factory=RunnerSpec)

    @field_validator("objectives")
    @classmethod
    def _distinct_objectives(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if not value:
            raise PydanticCustomError(
                "no_objectives",
                "names no objective; name at least one (e.g. [accuracy, weighted_bits]) or "
                "leave the key out for the problem's default",
            )
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise PydanticCustomError(
                "repeated_objectives",
                "names {names} more than once; name each objective once",
                {"names": ", ".join(repeated)},
            )
        return value

    @field_validator("layer_bounds")
    @classmethod
    def _ordered_bounds(cls, value: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
        for pattern, (low, high) in value.items():
            if low > high:
                raise PydanticCustomError(
                    "bounds_order",
                    "the lower bound {low} of '{pattern}' is above its upper bound {high}",
                    {"key": pattern, "low": low, "high": high, "pattern": pattern},
                )
        return value

    @model_validator(mode="after")
    def _within_limits(self) -> ExplorationSpec:
        limits = self.extra_args
        low, high = limits.num_bits_lower_limit, limits.num_bits_upper_limit
        for pattern, bounds in self.layer_bounds.items():
            if bounds[0] < low or bounds[1] > high:
                raise PydanticCustomError(
                    "bounds_range",
                    "{bounds} of '{pattern}' reach outside the explored range {low}-{high} "
                    "(extra_args.num_bits_lower_limit and num_bits_upper_limit); keep the "
                    "bounds within it or widen the limits",
                    {
                        "key": "layer_bounds",
                        "bounds": list(bounds),
                        "pattern": pattern,
                        "low": low,
                        "high": high,
                    },
                )
        above = [p for p in self.predefined_parameters if p > limits.threshold_limit]
        if above:
            raise PydanticCustomError(
                "above_limit",
                "{values} lie above extra_args.threshold_limit ({limit}); no threshold can "
                "exceed it: lower them or raise the limit",
                {"key": "predefined_parameters", "values": above, "limit": limits.threshold_limit},
            )
        return self

    @model_validator(mode="after")
    def _objectives_for_algorithm(self) -> ExplorationSpec:
        """A single objective (`objectives: [weighted_bits]`) with an algorithm that ranks among
        several is refused here; a problem's default objectives are always several."""
        name = self.algorithm.type
        one = self.objectives is not None and len(self.objectives) == 1
        if one and needs_several_objectives(name):
            raise PydanticCustomError(
                "one_objective", ONE_OBJECTIVE, {"key": "algorithm", "name": name}
            )
        return self
