"""Layer-wise quantization: one bit width per quantizer (or one format of a list of choices),
accuracy against bits, size or BOPs."""

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
from model_explorer.modules import leading, run_on
from model_explorer.plan import Plan, apply_plan
from model_explorer.problems.base import Constraint, Evaluation, ModelProblem, Objective, Variable
from model_explorer.problems.checks import check_layer_bounds
from model_explorer.problems.objectives import (
    Measured,
    PlanCosts,
    objective_info,
)
from model_explorer.problems.options import BitOptions, ProblemOptions, QuantizationOptions
from model_explorer.quantization import QuantizedModel


def per_output_minimum(
    minimum: float | Sequence[float] | None,
    outputs: int,
    key: str = "workload.problem.minimum_accuracy",
) -> list[float] | None:
    """One minimum accuracy per model output: a single value applies to every output."""
    if minimum is None:
        return None
    values = [float(minimum)] if isinstance(minimum, (int, float)) else [float(m) for m in minimum]
    if len(values) == 1:
        return values * outputs
    if len(values) != outputs:
        raise UserError(
            f"{key}: {len(values)} values for a model with {outputs} "
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


def chosen_objectives(options: ProblemOptions, higher: bool) -> list[Objective]:
    """The options' objectives (or the problem's default; the options model checked that the
    problem can compute them), each with its direction; the accuracy's is the metric's
    (`higher`: more is better)."""
    return [
        Objective(name, higher if name == "accuracy" else objective_info(name).maximize)
        for name in options.chosen_objectives
    ]


class LayerwiseQuantizationProblem(ModelProblem):
    """Genome: one integer per quantizer of a calibrated QuantizedModel, in its
    `explorable_modules` order (per layer: input, then weight): a bit width, or, with the
    options' `choices`, the index of a format among the quantizer's choices (cheapest first),
    decoded to the format's short name.

    Args:
        model: the calibrated QuantizedModel whose quantizers the genome sets.
        batches: the exploration data, an iterable of (inputs, targets) batches (a
            TensorCache), scored in full for every candidate unless early rejection stops it.
        metric: what `accuracy` measures (a MetricSpec or a metric name).
        options: the problem's settings (QuantizationOptions: objectives, bit limits,
            `layer_bounds`, `bit_weighting_function`, `early_reject`); defaults when None.
        minimum_accuracy: the limit each output's metric must keep (one value for all outputs
            or one per output; a maximum for a lower-is-better metric), resolved from the
            options and the baseline by `explore`; None: no constraint.
        energy: the EnergyModel of the quantized layers, needed by the `energy` objective.
        layer_costs: the quantized layers' sizes (name -> LayerCost); measured on the first
            batch's first sample when None.
    """

    name = "quantization_problem"

    def __init__(
        self,
        model: QuantizedModel,
        batches: Iterable[Any],
        metric: MetricSpec | str = "top1",
        options: BitOptions | None = None,
        minimum_accuracy: float | Sequence[float] | None = None,
        energy: EnergyModel | None = None,
        layer_costs: dict[str, LayerCost] | None = None,
    ) -> None:
        self.options = options = options if options is not None else QuantizationOptions()
        higher = higher_is_better(metric)
        self.objectives = chosen_objectives(options, higher)
        if any(o.name == "energy" for o in self.objectives) and energy is None:
            raise UserError(f"{options.key('objectives')}: 'energy' needs per-layer DRAM energies")
        self.model = model
        self.batches = batches
        self.metric = metric
        self.early_reject = options.early_reject
        names = model.explorable_modules
        # each pattern must match a quantizer
        check_layer_bounds(options.layer_bounds, names, options.key("layer_bounds"))
        # Per variable, the formats its gene indexes (None: the genes are bit widths).
        self.allowed: list[list[str]] | None = None
        if options.format_choices is None:
            self.variables = [
                Variable(name, *self._bounds(name, options.bits, options.layer_bounds))
                for name in names
            ]
        else:
            choices = options.format_choices
            self.allowed = [
                [c for c in choices if c in self._bounds(name, choices, options.layer_bounds)]
                for name in names
            ]
            self.variables = [
                Variable(name, 0, len(allowed) - 1)
                for name, allowed in zip(names, self.allowed, strict=True)
            ]
        example = leading(next(iter(batches))[0])
        with torch.no_grad():
            outputs = len(output_list(run_on(model, example)))
        self.minimum_accuracy = per_output_minimum(
            minimum_accuracy, outputs, options.key("minimum_accuracy")
        )
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
        self.energy = energy
        self.seeds: list[list[int]] = []
        self.constraints += self._budget(options)

    def _budget(self, options: BitOptions) -> list[Constraint]:
        """`budget`'s limits as constraints; one that even the cheapest configuration (every
        gene at its lowest) exceeds, or a cost not known without the model, refused."""
        if not options.budget:
            return []
        lowest = self.decode([v.lower for v in self.variables])
        known = self.cost_values(self.plan(lowest))
        for name, limit in options.budget.items():
            if name not in known:
                raise UserError(
                    f"{options.key('budget')}: '{name}' is not a cost known without the model; "
                    f"budget one of {', '.join(sorted(known))}"
                )
            if known[name] > limit:
                raise UserError(
                    f"{options.key('budget')}: {name} <= {limit:g} cannot be met: the cheapest "
                    f"configuration (every quantizer at its lowest choice) costs {known[name]:g}"
                )
        return [Constraint(name, maximum=limit) for name, limit in options.budget.items()]

    @staticmethod
    def _bounds(name: str, default: Any, layer_bounds: dict[str, Any]) -> Any:
        """What `layer_bounds` gives the quantizer `name` (the last pattern that matches
        wins): [low, high] bits or a list of formats; `default` when no pattern matches."""
        bounds = default
        for pattern, given in layer_bounds.items():
            if fnmatch.fnmatchcase(name, pattern):
                bounds = given
        return bounds

    def decode(self, genome: Sequence[float]) -> list[Any]:
        """Bit widths, or each gene's format by its short name."""
        configuration = super().decode(genome)
        if self.allowed is None:
            return configuration
        return [
            allowed[int(index)] for allowed, index in zip(self.allowed, configuration, strict=True)
        ]

    @property
    def sensitivity_refusal(self) -> str | None:
        """Why `seed_from_sensitivity` cannot seed this problem's genes (None: it can, they
        are bit widths)."""
        if self.allowed is None:
            return None
        return (
            "exploration.initialization: 'sensitivity' seeds bit widths; with "
            f"{self.options.key('choices')} the genes choose formats: use 'random' or 'spread'"
        )

    def initial_genomes(self) -> list[list[float]]:
        """Seeds for the first population (`seed_from_sensitivity`), else none."""
        return [list(map(float, genome)) for genome in self.seeds]

    def seed_from_sensitivity(self, count: int) -> int:
        """Seed `count` genomes along a bit allocation from the one-at-a-time sensitivity
        table at the lowest bit width and how fast each drop falls with the bits
        (sensitivity.allocation_path: the least sensitive quantizers, per unit of cost,
        lowered first), spread from its start down to the
        cheapest point that keeps the constraints (bisection over evaluations); returns the
        sample-forwards the table and the bisection took."""
        from model_explorer.quantization.sensitivity import (
            SensitivityTable,
            allocation_path,
            decay_rates,
            last_accepted,
            layer_sensitivity,
            resolvable,
            spread,
        )

        if self.sensitivity_refusal is not None:
            raise UserError(self.sensitivity_refusal)
        low = min(int(v.lower) for v in self.variables)
        bounds = [(int(v.lower), int(v.upper)) for v in self.variables]
        table = layer_sensitivity(self.model, self.batches, self.metric, low)
        # how fast each drop falls with the bits, from a second table two bits wider for the
        # quantizers whose drop there can be resolved (decay_rates; 4 per bit elsewhere)
        wider = SensitivityTable(table.baseline, low + 2, [], table.higher)
        if low + 2 < max(high for _, high in bounds):
            names = resolvable(table)
            wider = layer_sensitivity(
                self.model, self.batches, self.metric, low + 2, names, table.baseline
            )
        rates = decay_rates(table, wider)
        path = allocation_path(table, bounds, self._bit_weights(bounds), rates)
        spent = [(len(table.rows) + len(wider.rows) + 1) * self.batches.num_samples]

        def accepts(configuration: list[int]) -> bool:
            _, evaluation = self.evaluate(configuration)
            spent.append(int(evaluation.extra["samples"]))
            return evaluation.complete and self.feasible(evaluation.values)

        # the seeds from the top down to the cheapest point of the path that keeps the
        # constraints (found by bisection), where the front's cheap end begins
        last = last_accepted(path, accepts)
        self.seeds = spread(path[: last + 1] if last >= 0 else path, count)
        return sum(spent)

    def _bit_weights(self, bounds: list[tuple[int, int]]) -> list[float] | None:
        """What one bit less on each quantizer saves of the first cost objective known
        without the model, every other at its upper bound (None: no such objective)."""
        top = [high for _, high in bounds]
        known = self.known_values(top)
        name = next((o.name for o in self.objectives if o.name in known), None)
        if name is None:
            return None
        weights = [1.0] * len(bounds)  # a quantizer fixed at one width is never lowered
        for i, (low, high) in enumerate(bounds):
            if high > low:
                lower = top.copy()
                lower[i] = high - 1
                weights[i] = known[name] - self.known_values(lower)[name]
        return weights

    @property
    def plan_costs(self) -> PlanCosts:
        return PlanCosts(
            self.costs,
            self.options.bit_weighting_function,
            self.energy,
            self.objective_inputs,
            self.latency,
        )

    def cost_values(self, plan: Plan) -> dict[str, float]:
        """Every objective known without the model (problems/objectives.py) of a plan's bit
        widths: weighted bits, model size, BOPs per sample and, with an energy model, the DRAM
        energy in uJ."""
        costs, measured = self.plan_costs, Measured()
        return {
            entry.name: entry.builder(plan, costs, measured)
            for entry in self.recorded_objectives
            if entry.info.analytic
        }

    def known_values(self, configuration: list[Any]) -> dict[str, float]:
        return self.cost_values(self.plan(configuration))

    def apply_plan(self, plan: Plan) -> None:
        apply_plan(plan, quantized=self.model)

    def measure(self, configuration: list[Any]) -> Evaluation:
        plan = self.plan(configuration)
        self.apply_plan(plan)
        costs = self.cost_values(plan)
        return self.evaluation(self.score(costs), costs, plan)
