"""`sparsity_problem` and `quantization_sparsity_problem` from a workload."""

from __future__ import annotations

from typing import TYPE_CHECKING

from model_explorer.operations.quantization_builder import calibrated_parts
from model_explorer.problems.options import JointOptions, SparsityOptions
from model_explorer.problems.sparsity import QuantizationSparsityProblem, SparsityThresholdProblem
from model_explorer.sparsity.model import SparseModel

if TYPE_CHECKING:
    from model_explorer.workload.context import WorkloadContext


def build_sparsity_problem(
    context: WorkloadContext, options: SparsityOptions, minimum_accuracy: list[float] | None
) -> SparsityThresholdProblem:
    return SparsityThresholdProblem(
        SparseModel.from_spec(context.build_model(), context.workload.sparsity),
        context.batches("exploration"),
        context.workload.metric,
        options,
        minimum_accuracy,
    )


def build_joint_problem(
    context: WorkloadContext, options: JointOptions, minimum_accuracy: list[float] | None
) -> QuantizationSparsityProblem:
    quantized, coverage, energy = calibrated_parts(context, options)
    problem = QuantizationSparsityProblem(
        quantized,
        SparseModel.from_spec(quantized.model, context.workload.sparsity),
        context.batches("exploration"),
        context.workload.metric,
        options,
        minimum_accuracy=minimum_accuracy,
        energy=energy,
    )
    problem.coverage = coverage.to_dict()
    return problem
