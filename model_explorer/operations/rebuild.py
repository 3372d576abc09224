"""Problems built from a workload's context: the workload's own (`build_problem`), and a
result's, rebuilt with an individual's plan in effect: what retraining, re-evaluation and
comparison of a result's individuals start from; with its calibration file checked to be the
search's (`calibrated_problem`, `calibrated_individual`): the model `Search.model` hands back,
which needs no exporter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch import nn

from model_explorer.errors import UserError
from model_explorer.fileio import read_torch_file
from model_explorer.problems.base import ModelProblem, Problem
from model_explorer.problems.registry import PROBLEMS

if TYPE_CHECKING:
    from model_explorer.exploration.runners.recipe import ProblemRecipe
    from model_explorer.results import ExplorationResult, Individual
    from model_explorer.workload.context import WorkloadContext


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
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

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


def require_calibration(context: WorkloadContext, model: nn.Module) -> None:
    """The calibration file must exist and hold a calibration of these weights: an export
    writes its scales, so a stale file would deploy what the search never scored."""
    from model_explorer.operations.pipeline import calibration_file, weights_fingerprint

    path = calibration_file(context)
    if not path.exists():
        raise UserError(
            f"workload.calibration.file: '{path}' does not exist; the export needs the "
            "calibration the search used (run model-explorer calibrate)"
        )
    stored = read_torch_file(path, "workload.calibration.file", "calibration file")
    weights = stored.get("weights") if isinstance(stored, dict) else None
    if weights is not None and weights != weights_fingerprint(model):
        raise UserError(
            f"workload.calibration.file: '{path}' was made for other weights than "
            f"{context.workload.model.weights}; recalibrate or point the workload at the "
            "calibration the search used"
        )


def calibrated_problem(
    context: WorkloadContext, result: ExplorationResult, individual: Individual, where: str
) -> Any:
    """The individual's problem, its QuantizedModel (`.model`) with its plan in effect, once
    its calibration file is known to be the one the search used: what every runtime's form of
    it starts from."""
    problem = individual_problem(context, result, individual, where)
    require_calibration(context, problem.model.model)
    return problem


def calibrated_individual(
    context: WorkloadContext, result: ExplorationResult, individual: Individual, where: str
) -> nn.Module:
    """The QuantizedModel of `calibrated_problem`."""
    return calibrated_problem(context, result, individual, where).model
