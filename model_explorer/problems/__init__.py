"""Problems by name (`problem.problem_function`), each with its options;
`operations.rebuild.build_problem` builds the workload's from a WorkloadContext."""

from __future__ import annotations

from model_explorer.problems.base import (
    Constraint,
    Evaluation,
    Objective,
    Problem,
    Variable,
)
from model_explorer.problems.options import (
    EnergyAwareOptions,
    JointOptions,
    QuantizationOptions,
    SparsityOptions,
)
from model_explorer.problems.registry import PROBLEMS, register_deferred, register_problem

# The built-in problems: their options here, their builders in operations/ (they take the
# WorkloadContext, which is above the workload's settings), imported when first built.
_BUILDERS = "model_explorer.operations"
for _name, _options, _builder in (
    (
        "quantization_problem",
        QuantizationOptions,
        "quantization_builder:build_quantization_problem",
    ),
    ("energy_aware_quant_problem", EnergyAwareOptions, "quantization_builder:build_energy_problem"),
    ("sparsity_problem", SparsityOptions, "sparsity_builder:build_sparsity_problem"),
    ("quantization_sparsity_problem", JointOptions, "sparsity_builder:build_joint_problem"),
):
    register_deferred(_name, _options, f"{_BUILDERS}.{_builder}")

__all__ = [
    "PROBLEMS",
    "Constraint",
    "Evaluation",
    "Objective",
    "Problem",
    "Variable",
    "register_problem",
]
