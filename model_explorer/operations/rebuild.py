"""Problems built from a workload's context: the workload's own (`build_problem`), and a
result's, rebuilt with an individual's plan in effect: what retraining, re-evaluation and
comparison of a result's individuals start from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from model_explorer.errors import UserError
from model_explorer.problems.base import ModelProblem, Problem
from model_explorer.problems.registry import PROBLEMS

if TYPE_CHECKING:
    from model_explorer.context import WorkloadContext
    from model_explorer.exploration.runners.recipe import ProblemRecipe
    from model_explorer.results import ExplorationResult, Individual


def build_problem(
    context: WorkloadContext,
    minimum_accuracy: list[float] | None = None,
    name: str | None = None,
    where: str = "workload.problem.problem_function",
) -> Problem:
    """A problem built by its registered builder (problems/registry.py).

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
    problem = entry.builder(context, options, minimum_accuracy)
    rank(context, problem)
    return problem


# The metrics that count labels, whose problems `selection: auto` ranks by divergence.
LABEL_METRICS = frozenset({"top1", "top5", "topk", "pixel_accuracy", "mean_iou"})


def rank(context: WorkloadContext, problem: Problem) -> None:
    """Rank a model problem's candidates as its `selection` says (problems/options.py): by the
    divergence from the float model's outputs on the exploration data, or by the metric."""
    options = getattr(problem, "options", None)
    choice = getattr(options, "selection", "accuracy")
    if choice == "accuracy" or not isinstance(problem, ModelProblem):
        return
    metric = context.workload.metric
    outputs = getattr(problem, "outputs", 1)
    if choice == "auto":
        if metric.type not in LABEL_METRICS or outputs != 1:
            return
    elif outputs != 1:
        raise UserError(
            f"{options.key('selection')}: kl ranks by the divergence of one output, and the "
            f"model has {outputs}; set selection: accuracy"
        )
    problem.rank_by_divergence(lambda: context.float_outputs("exploration"))


def recipe_problem(recipe: ProblemRecipe) -> Problem:
    """The problem a worker process builds from a ProblemRecipe (the recipe's `builder`)."""
    from model_explorer.context import WorkloadContext
    from model_explorer.workload import Workload

    workload = Workload.from_dict(recipe.workload, root=recipe.root)
    return build_problem(WorkloadContext(workload), recipe.minimum_accuracy)


RECIPE_BUILDER = f"{__name__}:{recipe_problem.__name__}"


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
