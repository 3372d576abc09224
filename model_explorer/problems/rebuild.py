"""The problem of a result, rebuilt from the workload, with an individual's plan in effect: what
retraining, re-evaluation and comparison of a result's individuals start from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from model_explorer.errors import UserError
from model_explorer.problems.base import Problem
from model_explorer.problems.registry import build_problem

if TYPE_CHECKING:
    from model_explorer.context import WorkloadContext
    from model_explorer.results import ExplorationResult, Individual


def rebuild_problem(
    context: WorkloadContext, name: str, variables: Sequence[str], where: str = "RESULTS"
) -> Problem:
    """Problem `name` built afresh from the workload (a new model from the baseline checkpoint
    and the calibration file), which must have the variables the result was made with."""
    problem = build_problem(context, None, name, where)
    if [v.name for v in problem.variables] != list(variables):
        raise UserError(f"{where}: its variables do not match this workload's model")
    return problem


def individual_problem(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    where: str = "RESULTS",
) -> Problem:
    """The result's problem rebuilt, with the individual's plan in effect on its model."""
    problem = rebuild_problem(context, result.problem["name"], result.variable_names, where)
    problem.apply_plan(result.plan_of(individual))
    return problem
