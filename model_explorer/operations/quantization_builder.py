"""`quantization_problem` and `energy_aware_quant_problem`: the workload's calibrated model,
exploration data and the problem's options, with DRAM energy when an objective needs it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from model_explorer.operations.energy import build_energy_model
from model_explorer.operations.pipeline import build_quantized_model, report_coverage
from model_explorer.problems.options import BitOptions
from model_explorer.problems.quantization import LayerwiseQuantizationProblem

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from model_explorer.quantization.coverage import Coverage
    from model_explorer.quantization.model import QuantizedModel
    from model_explorer.workload.context import WorkloadContext


def calibrated_parts(
    context: WorkloadContext, options: Any, energy: bool = False
) -> tuple[QuantizedModel, Coverage, Any]:
    """What every quantizing problem starts from: the workload's calibrated model, its
    quantization coverage (reported once) and its energy model where an objective chosen in
    `options` needs it, or `energy` asks for it (else None)."""
    model = build_quantized_model(context)
    coverage = report_coverage(context, model)
    needed = energy or "energy" in options.chosen_needs
    return model, coverage, build_energy_model(context, list(model.layers)) if needed else None


def build_quantization_problem(
    context: WorkloadContext,
    options: BitOptions,
    minimum_accuracy: list[float] | None,
    energy: bool = False,
    latency: bool = True,
) -> LayerwiseQuantizationProblem:
    """The quantization problem of a workload: its calibrated model on its exploration data,
    with the energy model (where an objective needs it or `energy` asks) and the latency table
    (where an objective needs it or `problem.latency` says how to measure, unless `latency` is
    false: the latency command measures its own)."""
    model, coverage, energy_model = calibrated_parts(context, options, energy)
    problem = LayerwiseQuantizationProblem(
        model,
        context.batches("exploration"),
        context.workload.metric,
        options,
        minimum_accuracy,
        energy_model,
    )
    problem.coverage = coverage.to_dict()
    settings = options.latency_settings
    if settings is not None and latency:
        from model_explorer.operations.latency import latency_table, leave_out

        problem.latency, path, measured = latency_table(
            context, problem, settings, options.key("latency")
        )
        if measured:
            log.info("latency table measured in %s: %s", settings.runtime, path)
        dropped = leave_out(problem, problem.latency, options.key("latency"))
        if dropped:
            log.warning(
                "%s: left out of the genes, as the export or the runtime cannot run them: %s",
                options.key("latency"),
                "; ".join(dropped),
            )
    return problem


def build_energy_problem(
    context: WorkloadContext, options: BitOptions, minimum_accuracy: list[float] | None
) -> LayerwiseQuantizationProblem:
    """The original tool's energy-aware problem: accuracy against DRAM energy by default, the
    energy recorded whatever the objectives."""
    problem = build_quantization_problem(context, options, minimum_accuracy, energy=True)
    problem.name = "energy_aware_quant_problem"
    return problem
