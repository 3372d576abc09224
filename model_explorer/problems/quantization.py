"""Layer-wise quantization: one bit width per quantizer, accuracy against bits, size or BOPs."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from model_explorer.cost.bits import BitCostModel
from model_explorer.cost.energy.model import EnergyModel
from model_explorer.cost.layers import LayerCost, measure_layers
from model_explorer.errors import UserError
from model_explorer.metrics import MetricSpec, higher_is_better, output_list
from model_explorer.plan import Plan, apply_plan
from model_explorer.problems.base import Constraint, Evaluation, ModelProblem, Objective, Variable
from model_explorer.problems.checks import check_layer_bounds
from model_explorer.quantization import QuantizedModel

# Every quantity the problem measures, and whether more is better when it is an objective.
QUANTITIES = {
    "accuracy": True,
    "weighted_bits": False,
    "model_size": False,
    "bops": False,
    "energy": False,
}


def per_output_minimum(minimum: float | Sequence[float] | None, outputs: int) -> list[float] | None:
    """One minimum accuracy per model output: a single value applies to every output."""
    if minimum is None:
        return None
    values = [float(minimum)] if isinstance(minimum, (int, float)) else [float(m) for m in minimum]
    if len(values) == 1:
        return values * outputs
    if len(values) != outputs:
        raise UserError(
            f"exploration.minimum_accuracy: {len(values)} values for a model with {outputs} "
            "outputs; give one value, or one per output"
        )
    return values


def accuracy_constraints(limits: Sequence[float] | None, higher: bool = True) -> list[Constraint]:
    """The accuracy constraints: each output's metric at least its limit, or, for a metric
    where lower is better (a divergence), at most its limit."""
    if not limits:
        return []
    names = ["accuracy"] if len(limits) == 1 else [f"accuracy_{i}" for i in range(len(limits))]
    bound = "minimum" if higher else "maximum"
    return [Constraint(name, **{bound: value}) for name, value in zip(names, limits, strict=True)]


class LayerwiseQuantizationProblem(ModelProblem):
    """Genome: one integer bit width per quantizer of a calibrated QuantizedModel, in its
    `explorable_modules` order (per layer: input, then weight)."""

    name = "quantization_problem"

    def __init__(
        self,
        model: QuantizedModel,
        batches: Iterable[Any],
        metric: MetricSpec | str = "top1",
        objectives: Sequence[str] = ("accuracy", "weighted_bits"),
        minimum_accuracy: float | Sequence[float] | None = None,
        bits: tuple[int, int] = (4, 14),
        layer_bounds: dict[str, tuple[int, int]] | None = None,
        weighting: str = "bits_weighted_linear",
        early_reject: bool = True,
        layer_costs: dict[str, LayerCost] | None = None,
        energy: EnergyModel | None = None,
    ) -> None:
        unknown = [name for name in objectives if name not in QUANTITIES]
        if unknown:
            raise UserError(
                f"exploration.objectives: {unknown} cannot be used with this problem; choose from "
                f"{', '.join(QUANTITIES)}"
            )
        if "energy" in objectives and energy is None:
            raise UserError("exploration.objectives: 'energy' needs per-layer DRAM energies")
        self.energy = energy
        self.model = model
        self.batches = batches
        self.metric = metric
        self.weighting = weighting
        self.early_reject = early_reject
        names = model.explorable_modules
        check_layer_bounds(layer_bounds or {}, names)  # each pattern must match a quantizer
        self.variables = [
            Variable(name, *self._bounds(name, bits, layer_bounds or {})) for name in names
        ]
        higher = higher_is_better(metric)
        senses = {**QUANTITIES, "accuracy": higher}
        self.objectives = [Objective(name, senses[name]) for name in objectives]
        example = next(iter(batches))[0][:1]
        with torch.no_grad():
            outputs = len(output_list(model(example)))
        self.minimum_accuracy = per_output_minimum(minimum_accuracy, outputs)
        self.constraints = accuracy_constraints(self.minimum_accuracy, higher)
        if layer_costs is None:
            layer_costs = measure_layers(model, example, model.layers)
        missing = [name for name in model.layers if name not in layer_costs]
        if missing:
            raise UserError(
                f"quantization: layers {missing[:3]} never run in the model's forward pass; "
                "exclude them with quantization.exclude"
            )
        self.costs = BitCostModel({name: layer_costs[name] for name in model.layers})
        self.seeds: list[list[int]] = []

    @staticmethod
    def _bounds(
        name: str, bits: tuple[int, int], layer_bounds: dict[str, tuple[int, int]]
    ) -> tuple[int, int]:
        low, high = bits
        for pattern, bounds in layer_bounds.items():  # later patterns win
            if fnmatch.fnmatchcase(name, pattern):
                low, high = bounds
        return low, high

    def initial_genomes(self) -> list[list[float]]:
        """Seeds for the first population (`seed_from_sensitivity`), else none."""
        return [list(map(float, genome)) for genome in self.seeds]

    def seed_from_sensitivity(self, count: int) -> None:
        """Seed `count` genomes along the greedy path of the one-at-a-time sensitivity table
        at the lowest bit widths (least sensitive quantizers lowered first)."""
        from model_explorer.quantization.sensitivity import (
            greedy_configurations,
            layer_sensitivity,
            spread,
        )

        low = min(int(v.lower) for v in self.variables)
        table = layer_sensitivity(self.model, self.batches, self.metric, low)
        bounds = [(int(v.lower), int(v.upper)) for v in self.variables]
        self.seeds = spread(greedy_configurations(table, bounds), count)
        self.sensitivity = table

    def cost_values(self, plan: Plan) -> dict[str, float]:
        """Analytic costs of a plan's bit widths (see cost/bits.py): weighted bits, model size,
        BOPs per sample and, with an energy model, the DRAM energy in uJ."""
        values = self.costs.values(plan, self.weighting)
        if self.energy is not None:
            values["energy"] = self.energy.energy_uj(plan)
        return values

    def known_values(self, configuration: list[Any]) -> dict[str, float]:
        return self.cost_values(self.plan(configuration))

    def apply_plan(self, plan: Plan) -> None:
        apply_plan(plan, quantized=self.model)

    def measure(self, configuration: list[Any]) -> Evaluation:
        plan = self.plan(configuration)
        self.apply_plan(plan)
        costs = self.cost_values(plan)
        return self.evaluation(self.score(costs), costs)
