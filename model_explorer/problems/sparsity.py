"""Sparsity problems: one block threshold per layer, alone or together with bit widths."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from model_explorer.errors import UserError
from model_explorer.metrics import higher_is_better, output_list
from model_explorer.plan import Plan, apply_plan
from model_explorer.problems.base import Evaluation, ModelProblem, Objective, Variable
from model_explorer.problems.quantization import (
    QUANTITIES as QUANTIZATION_QUANTITIES,
)
from model_explorer.problems.quantization import (
    LayerwiseQuantizationProblem,
    accuracy_constraints,
    per_output_minimum,
)
from model_explorer.sparsity import SparseModel, discretize_threshold

SPARSITY_QUANTITIES = {"accuracy": True, "created_blocks": True, "block_sparsity": True}


def check_objectives(objectives: Sequence[str], quantities: dict[str, bool]) -> list[Objective]:
    unknown = [name for name in objectives if name not in quantities]
    if unknown:
        raise UserError(
            f"exploration.objectives: {unknown} cannot be used with this problem; choose from "
            f"{', '.join(quantities)}"
        )
    return [Objective(name, quantities[name]) for name in objectives]


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
    """Threshold genes in [0, limit], discretized as the workload says."""

    def __init__(self, names: Sequence[str], limit: float, steps: int, method: str) -> None:
        self.names = list(names)
        self.limit, self.steps, self.method = limit, steps, method

    def variables(self) -> list[Variable]:
        return [Variable(name, 0.0, self.limit, integer=False) for name in self.names]

    def decode(self, genes: Sequence[float]) -> list[float]:
        return [discretize_threshold(g, self.limit, self.steps, self.method) for g in genes]


class SparsityThresholdProblem(ModelProblem):
    """Genome: one threshold per sparsified layer. Objectives: accuracy and created sparse
    blocks per sample (both maximised) by default; the accuracy constraint as configured."""

    name = "sparsity_problem"

    def __init__(
        self,
        model: SparseModel,
        batches: Iterable[Any],
        metric: Any = "top1",
        objectives: Sequence[str] = ("accuracy", "created_blocks"),
        minimum_accuracy: float | Sequence[float] | None = None,
        threshold_limit: float = 1.0,
        steps: int = 20,
        method: str = "linear",
        predefined: Sequence[float] = (),
        early_reject: bool = True,
    ) -> None:
        self.model = model
        self.batches = batches
        self.metric = metric
        self.early_reject = early_reject
        self.genes = ThresholdGenes(model.explorable_modules, threshold_limit, steps, method)
        self.variables = self.genes.variables()
        higher = higher_is_better(metric)
        senses = {**SPARSITY_QUANTITIES, "accuracy": higher}
        self.objectives = check_objectives(objectives, senses)
        example = next(iter(batches))[0][:1]
        with torch.no_grad():
            outputs = len(output_list(model(example)))
        self.minimum_accuracy = per_output_minimum(minimum_accuracy, outputs)
        self.constraints = accuracy_constraints(self.minimum_accuracy, higher)
        self.predefined = [min(max(float(v), 0.0), threshold_limit) for v in predefined]

    def decode(self, genome: Sequence[float]) -> list[Any]:
        return self.genes.decode(genome)

    def initial_genomes(self) -> list[list[float]]:
        """`predefined_parameters`: each value seeds one individual with all thresholds equal."""
        return [[value] * len(self.variables) for value in self.predefined]

    def apply_plan(self, plan: Plan) -> None:
        apply_plan(plan, sparse=self.model)

    def measure(self, configuration: list[Any]) -> Evaluation:
        self.apply_plan(self.plan(configuration))
        self.model.reset_stats()
        outcome = self.score()
        blocks, layers = block_values(self.model)
        return self.evaluation(outcome, blocks, **layers)


JOINT_QUANTITIES = {
    **QUANTIZATION_QUANTITIES,
    **SPARSITY_QUANTITIES,
    "effective_bops": False,
}


class QuantizationSparsityProblem(LayerwiseQuantizationProblem):
    """Genome: every quantizer's bit width (integers, as in the quantization problem) followed
    by one block threshold per sparsified layer. `effective_bops` are the BOPs of each layer
    reduced by the share of its input blocks that are zero (present or created)."""

    name = "quantization_sparsity_problem"

    def __init__(
        self,
        model: Any,
        sparse: SparseModel,
        batches: Iterable[Any],
        metric: Any = "top1",
        objectives: Sequence[str] = ("accuracy", "effective_bops"),
        threshold_limit: float = 1.0,
        steps: int = 20,
        method: str = "linear",
        predefined: Sequence[float] = (),
        **kwargs: Any,
    ) -> None:
        check_objectives(objectives, JOINT_QUANTITIES)
        super().__init__(model, batches, metric, objectives=["accuracy"], **kwargs)
        # the accuracy's sense as the quantization problem found it (its only objective)
        senses = {**JOINT_QUANTITIES, "accuracy": self.objectives[0].maximize}
        self.objectives = check_objectives(objectives, senses)
        self.sparse = sparse
        self.genes = ThresholdGenes(sparse.explorable_modules, threshold_limit, steps, method)
        self.variables = [*self.variables, *self.genes.variables()]
        self.predefined = [min(max(float(v), 0.0), threshold_limit) for v in predefined]
        self.bit_count = len(self.model.explorable_modules)

    def decode(self, genome: Sequence[float]) -> list[Any]:
        bits = [int(round(g)) for g in genome[: self.bit_count]]
        return bits + self.genes.decode(genome[self.bit_count :])

    def initial_genomes(self) -> list[list[float]]:
        upper = [v.upper for v in self.variables[: self.bit_count]]
        return [upper + [value] * len(self.genes.names) for value in self.predefined]

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
        effective = self.costs.effective_bops(plan, kept)
        values = {**self.cost_values(plan), **blocks, "effective_bops": effective}
        return self.evaluation(outcome, values, **layers)
