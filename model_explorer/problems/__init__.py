"""Problems by name (`problem.problem_function`), each with its options; `build_problem` builds
the workload's from a WorkloadContext."""

from __future__ import annotations

# Explicit imports register the built-in problems; nothing else runs at import.
from model_explorer.problems import quantization_builder as _quantization  # noqa: E402,F401
from model_explorer.problems import sparsity_builder as _sparsity  # noqa: E402,F401
from model_explorer.problems.base import (
    Constraint,
    Evaluation,
    Objective,
    Problem,
    Variable,
)
from model_explorer.problems.rebuild import build_problem
from model_explorer.problems.registry import PROBLEMS, register_problem

__all__ = [
    "PROBLEMS",
    "Constraint",
    "Evaluation",
    "Objective",
    "Problem",
    "Variable",
    "build_problem",
    "register_problem",
]
