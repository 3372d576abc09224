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
    """Decorator registering `builder(context, options, minimum_accuracy)` as a problem.

    Args:
        name: the `problem.problem_function` that names it.
        options: the pydantic model of its settings (a subclass of
            problems.options.ProblemOptions), which checks the keys beside `problem_function`.
    """
    return PROBLEMS.register(name, options=options)


def build_problem(
    context: Any,
    minimum_accuracy: list[float] | None = None,
    name: str | None = None,
    where: str = "workload.problem.problem_function",
) -> Any:
    """A problem built by its registered builder. (The context is not imported here: the
    workload's settings import this registry.)

    Args:
        context: the WorkloadContext whose model and data the problem uses.
        minimum_accuracy: the limit each output's metric must keep (see `explore`'s
            `minimum_accuracy`), or None for no constraint.
        name: the problem to build; the workload's `problem_function` when None. The
            workload's options apply when it names the same problem, the defaults otherwise.
        where: the key path named when `name` is unknown.
    """
    spec = context.workload.problem
    name = name or spec.problem_function
    entry = PROBLEMS.get(name, where)
    options = spec.options if name == spec.problem_function else None
    if options is None and entry.options is not None:
        options = entry.options()
    return entry.builder(context, options, minimum_accuracy)
