"""Layer-wise quantization: one bit width per quantizer (or one format of a list of choices),
accuracy against bits, size or BOPs."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from model_explorer.cost.bits import BitCostModel
from model_explorer.cost.energy.model import EnergyModel
from model_explorer.cost.layers import LayerCost, measure_layers
from model_explorer.errors import UserError
from model_explorer.metrics.functions import MetricSpec, higher_is_better, output_list
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
from model_explorer.quantization.elision import ActivationElision
from model_explorer.quantization.model import QuantizedModel


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
        self.elision = ActivationElision(getattr(model, "model", model))
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
        self.outputs = outputs
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

    # Why `seed_from_sensitivity` cannot seed this problem's genes: None (other problems say)
    sensitivity_refusal: str | None = None

    def initial_genomes(self) -> list[list[float]]:  # the sensitivity seeds, else none
        return [list(map(float, genome)) for genome in self.seeds]

    def seed_from_sensitivity(
        self,
        count: int,
        saved: dict[str, Any] | None = None,
        keep: Callable[[dict[str, Any]], None] | None = None,
    ) -> int:
        """Seed `count` genomes along a bit allocation from the one-at-a-time sensitivity
        table at the lowest bit width and how fast each drop falls with the bits
        (sensitivity.allocation_path: the least sensitive quantizers, per unit of cost,
        lowered first), spread from its start down to the
        cheapest point that keeps the constraints (bisection over evaluations); returns the
        sample-forwards the table and the bisection took.

        `saved`: what an earlier run of the same search kept (its tables, then its seeds),
        taken instead of measuring again; `keep` is handed that record as each part of it
        exists, for the result file."""
        from model_explorer.quantization.sensitivity import (
            allocation_path,
            decay_rates,
            last_accepted,
            spread,
        )

        record = dict(saved or {})
        if "seeds" in record:
            self.seeds = [list(map(int, genome)) for genome in record["seeds"]]
            return int(record["forwards"])
        keep = keep or (lambda _: None)
        if self.allowed is not None:
            path, forwards = self._format_path(record, keep)
        else:
            bounds = [(int(v.lower), int(v.upper)) for v in self.variables]
            table, wider = self._sensitivity_tables(bounds, record, keep)
            rates = decay_rates(table, wider)
            path = allocation_path(table, bounds, self._bit_weights(bounds), rates)
            wide = self.sensitivity_scoring(wider=True)[0].num_samples
            forwards = (len(table.rows) + 1) * self.batches.num_samples + len(wider.rows) * wide
        spent = [forwards]

        def accepts(configuration: list[int]) -> bool:
            _, evaluation = self.evaluate(configuration)
            spent.append(int(evaluation.extra["samples"]))
            return evaluation.complete and self.feasible(evaluation.values)

        # the seeds from the top down to the cheapest point of the path that keeps the
        # constraints (found by bisection), where the front's cheap end begins
        last = last_accepted(path, accepts)
        self.seeds = spread(path[: last + 1] if last >= 0 else path, count)
        record.update(seeds=[list(map(int, g)) for g in self.seeds], forwards=sum(spent))
        keep(record)
        return sum(spent)

    def _format_path(
        self, record: dict[str, Any], keep: Callable[[dict[str, Any]], None]
    ) -> tuple[list[list[int]], int]:
        """The formats search's allocation path (quantization/format_sensitivity.py) and the
        sample-forwards of its table (a pass per quantizer and format, and the float one),
        read from `record` as far as it was kept there, and kept after each quantizer."""
        from model_explorer.formats import format_bits
        from model_explorer.quantization.format_sensitivity import (
            FormatTable,
            format_path,
            format_sensitivity,
        )

        assert self.allowed is not None
        names = [v.name for v in self.variables]

        def keeping(table: FormatTable) -> None:
            record["formats"] = table.to_plain()
            keep(record)

        kept = FormatTable.from_plain(record["formats"]) if "formats" in record else None
        choices = dict(zip(names, self.allowed, strict=True))
        batches, metric = self.sensitivity_scoring()
        table = format_sensitivity(self.model, batches, metric, choices, kept, keeping)
        bits = [[format_bits(f) for f in allowed] for allowed in self.allowed]
        _, path = format_path(table, names, self._format_costs(bits), bits)
        return path, (1 + sum(len(allowed) for allowed in self.allowed)) * self.batches.num_samples

    def _format_costs(self, bits: list[list[float]]) -> list[list[float]]:
        """Per quantizer and choice, the first cost objective known without the model with
        that quantizer at that choice and every other at its dearest (bits per element where
        no such objective is)."""
        top = [max(range(len(width)), key=width.__getitem__) for width in bits]
        costs = self._one_gene_costs(top, [range(len(width)) for width in bits])
        return bits if costs is None else costs[1]

    def _sensitivity_tables(
        self,
        bounds: list[tuple[int, int]],
        record: dict[str, Any],
        keep: Callable[[dict[str, Any]], None],
    ) -> tuple[Any, Any]:
        """The table at the lowest bit width and, for the quantizers whose drop there can be
        resolved, the one two bits wider (how fast each drop falls with the bits: decay_rates;
        4 per bit elsewhere); each read from `record` where kept there, else measured and kept."""
        from model_explorer.quantization.sensitivity import (
            SensitivityTable,
            layer_sensitivity,
            resolvable,
        )

        tables = record.setdefault("tables", {})
        low = min(low for low, _ in bounds)
        if str(low) not in tables:
            batches, metric = self.sensitivity_scoring()
            measured = layer_sensitivity(self.model, batches, metric, low)
            tables[str(low)] = measured.to_plain()
            keep(record)
        table = SensitivityTable.from_plain(tables[str(low)])
        if low + 2 >= max(high for _, high in bounds):
            return table, SensitivityTable(table.baseline, low + 2, [], table.higher)
        if str(low + 2) not in tables:
            batches, metric = self.sensitivity_scoring(wider=True)
            wider = layer_sensitivity(
                self.model, batches, metric, low + 2, resolvable(table), table.baseline
            )
            tables[str(low + 2)] = wider.to_plain()
            keep(record)
        return table, SensitivityTable.from_plain(tables[str(low + 2)])

    def _bit_weights(self, bounds: list[tuple[int, int]]) -> list[float] | None:
        """What one bit less on each quantizer saves of the first cost objective known
        without the model, every other at its upper bound (None: no such objective)."""
        top = [high for _, high in bounds]
        lowered = [[high - 1] if high > low else [] for low, high in bounds]
        costs = self._one_gene_costs(top, lowered)
        if costs is None:
            return None
        at_top, rows = costs
        # a quantizer fixed at one width is never lowered
        return [at_top - row[0] if row else 1.0 for row in rows]

    def _one_gene_costs(
        self, top: list[int], genes: Sequence[Iterable[int]]
    ) -> tuple[float, list[list[float]]] | None:
        """The first cost objective known without the model at the genome `top`, and per gene
        i, at each of `genes[i]`'s values with only that gene changed (None: the problem has
        no such objective)."""
        known = self.known_values(self.decode(top))
        name = next((o.name for o in self.objectives if o.name in known), None)
        if name is None:
            return None
        rows = []
        for i, values in enumerate(genes):
            row = []
            for value in values:
                changed = list(top)
                changed[i] = value
                row.append(self.known_values(self.decode(changed))[name])
            rows.append(row)
        return known[name], rows

    @property
    def plan_costs(self) -> PlanCosts:
        """What the objectives price a plan with: layer costs, bit weighting, energy and latency."""
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

    def score(self, known: dict[str, float] | None = None) -> Any:
        """ModelProblem's score, the activations the candidate's quantizers make redundant
        skipped (quantization/elision.py: the same values, a pass over each fewer)."""
        with self.elision.applied():
            return super().score(known)

    def measure(self, configuration: list[Any]) -> Evaluation:
        plan = self.plan(configuration)
        self.apply_plan(plan)
        costs = self.cost_values(plan)
        return self.evaluation(self.score(costs), costs, plan)
