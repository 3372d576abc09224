"""The problem registry: each entry is a builder and its options model (problems/options.py),
the keys a workload gives beside `problem.problem_function`.

A builder is called as `builder(context, options, minimum_accuracy)`: the WorkloadContext gives
the model and data, `options` the problem's own validated settings, `minimum_accuracy` the limit
each output's metric must keep (resolved from the options and the baseline by `explore`), or
None for no constraint. The workload's settings read this registry (each problem's options);
`build_problem`, which takes the context built from them, and the built-in builders live above
it in operations/ (registered here by their import paths).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_explorer.schema.registry import Registry, import_object

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


def register_deferred(name: str, options: Any, builder: str) -> None:
    """Register a problem whose builder lives above the context (operations/), named by its
    `package.module:function` and imported when a workload's problem is first built: the
    workload's settings read its options without importing what builds it."""

    def build(context: Any, chosen: Any, minimum_accuracy: list[float] | None) -> Any:
        found = import_object(builder, f"problem {name}", "problem builder")
        return found(context, chosen, minimum_accuracy)

    build.__doc__ = f"{builder} (imported on first use)"
    PROBLEMS.register(name, options=options)(build)
