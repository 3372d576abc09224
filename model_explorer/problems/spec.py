"""The workload's `problem:` settings (the original tool's section): which problem to explore
(`problem_function`), the original's run settings, and beside them the problem's own options
(problems/options.py), checked by the options model registered with the problem."""

from __future__ import annotations

from typing import ClassVar

from model_explorer.problems.registry import PROBLEMS
from model_explorer.registry import Registry
from model_explorer.schema import NonNegativeInt, TypedSpec


class ProblemSpec(TypedSpec):
    """`problem_function` names a registered problem; its options sit beside it, e.g.
    `{problem_function: quantization_problem, num_bits_lower_limit: 2, objectives: [accuracy,
    bops]}`."""

    registry: ClassVar[Registry] = PROBLEMS
    type_key: ClassVar[str] = "problem_function"

    problem_function: str = "quantization_problem"
    gpu_id: NonNegativeInt | None = None
    log_file: str | None = None
    clear_log_file: bool = False
    results_file: str | None = None
