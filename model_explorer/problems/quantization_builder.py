"""`quantization_problem` and `energy_aware_quant_problem`: the workload's calibrated model,
exploration data and bit limits, with DRAM energy when an objective needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from model_explorer.cost.energy.workload import build_energy_model
from model_explorer.problems.quantization import LayerwiseQuantizationProblem
from model_explorer.problems.registry import register_problem
from model_explorer.quantization.pipeline import build_quantized_model

if TYPE_CHECKING:
    from model_explorer.context import WorkloadContext
    from model_explorer.exploration.spec import ExplorationSpec


def bit_settings(exploration: ExplorationSpec) -> dict[str, Any]:
    """The problem keywords the workload's bit limits, bounds, weighting and early rejection
    set, shared by every problem with bit widths in its genome."""
    limits = exploration.extra_args
    return {
        "bits": (limits.num_bits_lower_limit, limits.num_bits_upper_limit),
        "layer_bounds": exploration.layer_bounds,
        "weighting": limits.bit_weighting_function,
        "early_reject": exploration.early_reject,
    }


def _quantization_problem(
    context: WorkloadContext, minimum_accuracy: list[float] | None, objectives: list[str]
) -> LayerwiseQuantizationProblem:
    exploration = context.workload.require("exploration")
    model = build_quantized_model(context)
    energy = build_energy_model(context, list(model.layers)) if "energy" in objectives else None
    return LayerwiseQuantizationProblem(
        model,
        context.batches("exploration"),
        context.workload.metric,
        objectives=objectives,
        minimum_accuracy=minimum_accuracy,
        energy=energy,
        **bit_settings(exploration),
    )


@register_problem("quantization_problem")
def build_quantization_problem(
    context: WorkloadContext, minimum_accuracy: list[float] | None
) -> LayerwiseQuantizationProblem:
    objectives = context.workload.require("exploration").objectives
    return _quantization_problem(
        context, minimum_accuracy, objectives or ["accuracy", "weighted_bits"]
    )


@register_problem("energy_aware_quant_problem")
def build_energy_problem(
    context: WorkloadContext, minimum_accuracy: list[float] | None
) -> LayerwiseQuantizationProblem:
    """The original tool's energy-aware problem: accuracy against DRAM energy by default."""
    objectives = context.workload.require("exploration").objectives or ["accuracy", "energy"]
    problem = _quantization_problem(context, minimum_accuracy, objectives)
    problem.name = "energy_aware_quant_problem"
    if problem.energy is None:
        problem.energy = build_energy_model(context, list(problem.model.layers))
    return problem
