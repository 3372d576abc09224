"""The problem registry: each entry is a builder and its options model (problems/options.py),
the keys a workload gives beside `problem.problem_function`.

A builder is called as `builder(context, options, minimum_accuracy)`: the WorkloadContext gives
the model and data, `options` the problem's own validated settings, `minimum_accuracy` the limit
each output's metric must keep (resolved from the options and the baseline by `explore`), or
None for no constraint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_explorer.registry import Registry

ProblemBuilder = Callable[..., Any]
PROBLEMS: Registry[ProblemBuilder] = Registry("problem function")


def register_problem(name: str, options: Any = None) -> Callable[[ProblemBuilder], ProblemBuilder]:
    """Decorator registering `builder(context, options, minimum_accuracy)` under `name`, with
    the pydantic model of its options (a subclass of problems.options.ProblemOptions)."""
    return PROBLEMS.register(name, options=options)


def build_problem(
    context: Any,
    minimum_accuracy: list[float] | None = None,
    name: str | None = None,
    where: str = "workload.problem.problem_function",
) -> Any:
    """The problem of a WorkloadContext's workload (or problem `name`, with the workload's
    options when it names the same problem and the defaults otherwise), built by its registered
    builder. (The context is not imported here: the workload's settings import this registry.)"""
    spec = context.workload.problem
    name = name or spec.problem_function
    entry = PROBLEMS.get(name, where)
    options = spec.options if name == spec.problem_function else None
    if options is None and entry.options is not None:
        options = entry.options()
    return entry.builder(context, options, minimum_accuracy)
