"""`sparsity_problem` and `quantization_sparsity_problem` from a workload."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from model_explorer.cost.energy.workload import build_energy_model
from model_explorer.problems.quantization_builder import bit_settings
from model_explorer.problems.registry import register_problem
from model_explorer.problems.sparsity import QuantizationSparsityProblem, SparsityThresholdProblem
from model_explorer.quantization.pipeline import build_quantized_model
from model_explorer.sparsity import SparseModel

if TYPE_CHECKING:
    from model_explorer.context import WorkloadContext
    from model_explorer.exploration.spec import ExplorationSpec


def _sparse(context: WorkloadContext, model) -> SparseModel:  # noqa: ANN001
    block = context.workload.require("exploration").extra_args.block_size
    return SparseModel.from_spec(model, context.workload.sparsity, block)


def threshold_settings(exploration: ExplorationSpec) -> dict[str, Any]:
    """The problem keywords the workload's threshold discretization and predefined
    individuals set, shared by both problems with thresholds in their genome."""
    limits = exploration.extra_args
    return {
        "threshold_limit": limits.threshold_limit,
        "steps": limits.discrete_threshold_steps,
        "method": limits.discrete_threshold_method,
        "predefined": exploration.predefined_parameters,
    }


@register_problem("sparsity_problem")
def build_sparsity_problem(
    context: WorkloadContext, minimum_accuracy: list[float] | None
) -> SparsityThresholdProblem:
    exploration = context.workload.require("exploration")
    return SparsityThresholdProblem(
        _sparse(context, context.build_model()),
        context.batches("exploration"),
        context.workload.metric,
        objectives=exploration.objectives or ["accuracy", "created_blocks"],
        minimum_accuracy=minimum_accuracy,
        early_reject=exploration.early_reject,
        **threshold_settings(exploration),
    )


@register_problem("quantization_sparsity_problem")
def build_joint_problem(
    context: WorkloadContext, minimum_accuracy: list[float] | None
) -> QuantizationSparsityProblem:
    exploration = context.workload.require("exploration")
    quantized = build_quantized_model(context)
    objectives = exploration.objectives or ["accuracy", "effective_bops"]
    energy = build_energy_model(context, list(quantized.layers)) if "energy" in objectives else None
    return QuantizationSparsityProblem(
        quantized,
        _sparse(context, quantized.model),
        context.batches("exploration"),
        context.workload.metric,
        objectives=objectives,
        minimum_accuracy=minimum_accuracy,
        energy=energy,
        **threshold_settings(exploration),
        **bit_settings(exploration),
    )
