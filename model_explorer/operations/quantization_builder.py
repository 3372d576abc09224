"""`quantization_problem` and `energy_aware_quant_problem`: the workload's calibrated model,
exploration data and the problem's options, with DRAM energy when an objective needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from model_explorer.operations.energy import build_energy_model
from model_explorer.operations.pipeline import build_quantized_model, report_coverage
from model_explorer.problems.options import BitOptions
from model_explorer.problems.quantization import LayerwiseQuantizationProblem

if TYPE_CHECKING:
    from model_explorer.context import WorkloadContext


def build_quantization_problem(
    context: WorkloadContext, options: BitOptions, minimum_accuracy: list[float] | None
) -> LayerwiseQuantizationProblem:
    model = build_quantized_model(context)
    coverage = report_coverage(context, model)
    energy = (
        build_energy_model(context, list(model.layers))
        if "energy" in options.chosen_needs
        else None
    )
    problem = LayerwiseQuantizationProblem(
        model,
        context.batches("exploration"),
        context.workload.metric,
        options,
        minimum_accuracy,
        energy,
    )
    problem.coverage = coverage.to_dict()
    return problem


def build_energy_problem(
    context: WorkloadContext, options: BitOptions, minimum_accuracy: list[float] | None
) -> LayerwiseQuantizationProblem:
    """The original tool's energy-aware problem: accuracy against DRAM energy by default, the
    energy recorded whatever the objectives."""
    model = build_quantized_model(context)
    coverage = report_coverage(context, model)
    problem = LayerwiseQuantizationProblem(
        model,
        context.batches("exploration"),
        context.workload.metric,
        options,
        minimum_accuracy,
        build_energy_model(context, list(model.layers)),
    )
    problem.name = "energy_aware_quant_problem"
    problem.coverage = coverage.to_dict()
    return problem
