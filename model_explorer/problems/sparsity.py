"""Sparsity problems: one block threshold per layer, alone or together with bit widths."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from model_explorer.metrics.functions import higher_is_better, output_list
from model_explorer.modules import leading, run_on
from model_explorer.plan import Plan, apply_plan
from model_explorer.problems.base import Evaluation, ModelProblem, Variable
from model_explorer.problems.objectives import Measured
from model_explorer.problems.options import JointOptions, SparsityOptions, ThresholdOptions
from model_explorer.problems.quantization import (
    LayerwiseQuantizationProblem,
    accuracy_constraints,
    chosen_objectives,
    per_output_minimum,
)
from model_explorer.sparsity.discretize import discretize_threshold
from model_explorer.sparsity.model import SparseModel


def block_values(model: SparseModel) -> tuple[dict[str, float], dict[str, Any]]:
    """Per-sample block counts summed over layers, and the raw per-layer counts."""
    stats = model.stats()
    samples = max(next(iter(stats.values()))["samples"], 1)
    total = sum(s["total_blocks"] for s in stats.values())
    present = sum(s["present_blocks"] for s in stats.values())
    created = sum(s["created_blocks"] for s in stats.values())
    values = {
        "created_blocks": created / samples,
        "present_blocks": present / samples,
        "total_blocks": total / samples,
        "block_sparsity": (created + present) / total if total else 0.0,
    }
    layers = {
        "blocks": {
            name: [s["total_blocks"], s["present_blocks"], s["created_blocks"]]
            for name, s in stats.items()
        },
        "block_samples": samples,
    }
    return values, layers


class ThresholdGenes:
    """Threshold genes in [0, limit], discretized as the options say, and the individuals of
    `predefined_parameters` (all thresholds equal)."""

    def __init__(self, names: Sequence[str], options: ThresholdOptions) -> None:
        self.names = list(names)
        self.limit = options.threshold_limit
        self.steps = options.discrete_threshold_steps
        self.method = options.discrete_threshold_method
        self.predefined = [
            min(max(float(v), 0.0), self.limit) for v in options.predefined_parameters
        ]

    def variables(self) -> list[Variable]:
        return [Variable(name, 0.0, self.limit, integer=False) for name in self.names]

    def decode(self, genes: Sequence[float]) -> list[float]:
        return [discretize_threshold(g, self.limit, self.steps, self.method) for g in genes]


class SparsityThresholdProblem(ModelProblem):
    """Genome: one threshold per sparsified layer. Objectives: accuracy and created sparse
    blocks per sample (both maximised) by default; the accuracy constraint as configured.

    Args:
        model: the SparseModel whose sparsifiers' thresholds the genome sets.
        batches: the exploration data, an iterable of (inputs, targets) batches.
        metric: what `accuracy` measures (a MetricSpec or a metric name).
        options: the problem's settings (SparsityOptions: objectives, threshold limit and
            discretisation, `predefined_parameters`, `early_reject`); defaults when None.
        minimum_accuracy: the limit each output's metric must keep (see
            LayerwiseQuantizationProblem); None: no constraint.
    """

    name = "sparsity_problem"

    def __init__(
        self,
        model: SparseModel,
        batches: Iterable[Any],
        metric: Any = "top1",
        options: ThresholdOptions | None = None,
        minimum_accuracy: float | Sequence[float] | None = None,
    ) -> None:
        self.options = options = options if options is not None else SparsityOptions()
        self.model = model
        self.batches = batches
        self.metric = metric
        self.early_reject = options.early_reject
        self.genes = ThresholdGenes(model.explorable_modules, options)
        self.variables = self.genes.variables()
        higher = higher_is_better(metric)
        self.objectives = chosen_objectives(options, higher)
        example = leading(next(iter(batches))[0])
        with torch.no_grad():
            outputs = len(output_list(run_on(model, example)))
        self.outputs = outputs
        self.minimum_accuracy = per_output_minimum(
            minimum_accuracy, outputs, options.key("minimum_accuracy")
        )
        self.constraints = accuracy_constraints(self.minimum_accuracy, higher)

    def decode(self, genome: Sequence[float]) -> list[Any]:
        return self.genes.decode(genome)

    def initial_genomes(self) -> list[list[float]]:
        """`predefined_parameters`: each value seeds one individual with all thresholds equal."""
        return [[value] * len(self.variables) for value in self.genes.predefined]

    def apply_plan(self, plan: Plan) -> None:
        apply_plan(plan, sparse=self.model)

    def measure(self, configuration: list[Any]) -> Evaluation:
        plan = self.plan(configuration)
        self.apply_plan(plan)
        self.model.reset_stats()
        outcome = self.score()
        blocks, layers = block_values(self.model)
        values = {**blocks, **self.measured_values(plan, Measured(blocks=blocks))}
        return self.evaluation(outcome, values, plan, **layers)


class QuantizationSparsityProblem(LayerwiseQuantizationProblem):
    """Genome: every quantizer's bit width (integers, as in the quantization problem) followed
    by one block threshold per sparsified layer. `effective_bops` are the BOPs of each layer
    reduced by the share of its input blocks that are zero (present or created).

    Args:
        model: the calibrated QuantizedModel whose quantizers the genome sets.
        sparse: a SparseModel over `model.model`, whose sparsifiers' thresholds the genome sets.
        batches: the data candidates are scored on, as for LayerwiseQuantizationProblem.
        metric: the score, as for LayerwiseQuantizationProblem.
        options: the problem's settings (JointOptions: those of both genomes); defaults when
            None.
        **kwargs: `minimum_accuracy`, `energy` and `layer_costs`, as for
            LayerwiseQuantizationProblem.
    """

    name = "quantization_sparsity_problem"

    def __init__(
        self,
        model: Any,
        sparse: SparseModel,
        batches: Iterable[Any],
        metric: Any = "top1",
        options: JointOptions | None = None,
        **kwargs: Any,
    ) -> None:
        options = options if options is not None else JointOptions()
        super().__init__(model, batches, metric, options, **kwargs)
        self.sparse = sparse
        self.genes = ThresholdGenes(sparse.explorable_modules, options)
        self.variables = [*self.variables, *self.genes.variables()]
        self.bit_count = len(self.model.explorable_modules)

    def decode(self, genome: Sequence[float]) -> list[Any]:
        bits = [int(round(g)) for g in genome[: self.bit_count]]
        return bits + self.genes.decode(genome[self.bit_count :])

    @property
    def sensitivity_refusal(self) -> str | None:
        """Its genes are thresholds too; its first genomes are the predefined thresholds."""
        return (
            "exploration.initialization: 'sensitivity' seeds bit widths; "
            f"{self.name}'s genes are block thresholds too (its first genomes are the "
            "predefined thresholds at the upper bit widths): use 'random'"
        )

    def initial_genomes(self) -> list[list[float]]:
        upper = [v.upper for v in self.variables[: self.bit_count]]
        return [upper + [value] * len(self.genes.names) for value in self.genes.predefined]

    def apply_plan(self, plan: Plan) -> None:
        apply_plan(plan, quantized=self.model, sparse=self.sparse)

    def measure(self, configuration: list[Any]) -> Evaluation:
        plan = self.plan(configuration)
        self.apply_plan(plan)
        self.sparse.reset_stats()
        outcome = self.score()
        blocks, layers = block_values(self.sparse)
        kept = {
            name: 1.0 - ((present + created) / total if total else 0.0)
            for name, (total, present, created) in layers["blocks"].items()
        }
        measured = self.measured_values(plan, Measured(blocks=blocks, kept=kept))
        values = {**self.cost_values(plan), **blocks, **measured}
        return self.evaluation(outcome, values, plan, **layers)
