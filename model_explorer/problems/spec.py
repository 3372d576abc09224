"""The workload's `problem:` settings (the original tool's section): which problem to explore."""

from __future__ import annotations

from pydantic import field_validator
from pydantic_core import PydanticCustomError

from model_explorer.errors import did_you_mean
from model_explorer.problems.registry import PROBLEMS
from model_explorer.schema import NonNegativeInt, Spec


class ProblemSpec(Spec):
    problem_function: str = "quantization_problem"
    gpu_id: NonNegativeInt | None = None
    log_file: str | None = None
    clear_log_file: bool = False
    results_file: str | None = None

    @field_validator("problem_function")
    @classmethod
    def _known_problem(cls, value: str) -> str:
        if value not in PROBLEMS:
            raise PydanticCustomError(
                "unknown_problem",
                "unknown problem function '{name}'{hint}; known: {known}",
                {
                    "name": value,
                    "hint": did_you_mean(value, PROBLEMS.names()),
                    "known": ", ".join(PROBLEMS.names()),
                },
            )
        return value
