"""`quantization_problem`: the workload's calibrated model, exploration data and bit limits."""

from __future__ import annotations

from model_explorer.context import WorkloadContext
from model_explorer.problems.quantization import LayerwiseQuantizationProblem
from model_explorer.problems.registry import register_problem
from model_explorer.quantization.pipeline import build_quantized_model


@register_problem("quantization_problem")
def build_quantization_problem(
    context: WorkloadContext, minimum_accuracy: list[float] | None
) -> LayerwiseQuantizationProblem:
    exploration = context.workload.require("exploration")
    limits = exploration.extra_args
    return LayerwiseQuantizationProblem(
        build_quantized_model(context),
        context.batches("exploration"),
        context.workload.metric,
        objectives=exploration.objectives or ["accuracy", "weighted_bits"],
        minimum_accuracy=minimum_accuracy,
        bits=(limits.num_bits_lower_limit, limits.num_bits_upper_limit),
        layer_bounds=exploration.layer_bounds,
        weighting=limits.bit_weighting_function,
        early_reject=exploration.early_reject,
    )
