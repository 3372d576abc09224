"""The problem registry. A builder takes (WorkloadContext, minimum accuracies or None)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_explorer.registry import Registry

ProblemBuilder = Callable[..., Any]
PROBLEMS: Registry[ProblemBuilder] = Registry("problem function")


def register_problem(name: str) -> Callable[[ProblemBuilder], ProblemBuilder]:
    return PROBLEMS.register(name)
