"""Re-evaluating chosen individuals of a result on the full `reevaluation` data."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from model_explorer.errors import UserError
from model_explorer.operations.rebuild import rebuild_problem
from model_explorer.results import ExplorationResult, Individual
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


def check_same_model(workload: Workload, result: ExplorationResult) -> None:
    """A result can only be re-evaluated or retrained with the model it was made for."""
    if result.workload.get("workload", {}).get("model") != workload.to_dict()["workload"]["model"]:
        raise UserError("RESULTS: the result was made for another model than this workload's")


def primary_cost(result: ExplorationResult) -> str:
    """The first objective that is minimised (e.g. weighted_bits), not the accuracy (nor the
    divergence that ranked it)."""
    for name, maximize in result.judged:
        if not maximize and name != "accuracy":
            return name
    raise UserError("the result has no cost objective to rank individuals by")


def best_feasible(
    result: ExplorationResult, count: int, among: list[Individual] | None = None
) -> list[Individual]:
    """The `count` feasible individuals (of `among`, else of the whole result) with the lowest
    primary cost (ties: higher accuracy)."""
    cost = primary_cost(result)
    feasible = result.feasible() if among is None else [i for i in among if i.feasible]
    ranked = sorted(feasible, key=lambda i: (i.values[cost], -i.values.get("accuracy", 0)))
    return ranked[:count]


def reevaluate(
    workload: Workload,
    result: ExplorationResult,
    count: int,
    context: WorkloadContext | None = None,
    front: bool = False,
) -> pd.DataFrame:
    """Each chosen individual's row of `result.to_dataframe()` plus `reevaluation_accuracy` on
    `reevaluation.datasets.reevaluate` (one column per output for multi-output models): the
    `count` feasible ones of lowest primary cost, or with `front` the feasible members of the
    Pareto front."""
    check_same_model(workload, result)
    among = result.pareto_front() if front else None
    chosen = best_feasible(result, len(among) if among is not None else count, among)
    if not chosen:
        raise UserError("RESULTS: the result holds no feasible individual to re-evaluate")
    context = context or WorkloadContext(workload)
    context.dataset("reevaluate")  # fail early when the workload has no reevaluation data
    problem = rebuild_problem(context, result.problem["name"], result.variable_names)
    frame = result.to_dataframe().set_index("id")
    rows = []
    for individual in chosen:
        problem.apply_plan(result.plan_of(individual))
        accuracy = context.evaluate(problem.model, "reevaluate")
        row = frame.loc[individual.id].to_dict()
        row["id"] = individual.id
        if isinstance(accuracy, list):
            row.update({f"reevaluation_accuracy_{i}": a for i, a in enumerate(accuracy)})
        row["reevaluation_accuracy"] = one_accuracy(accuracy)
        rows.append(row)
        log.info("individual %d: full accuracy %s", individual.id, accuracy)
    import pandas as pd  # only here: explore imports this module for one_accuracy

    columns = ["id", "reevaluation_accuracy"]
    table = pd.DataFrame(rows)
    return table[columns + [c for c in table.columns if c not in columns]]


def one_accuracy(accuracy: float | list[float]) -> float:
    """One figure per model: the mean over a multi-output model's outputs."""
    return float(sum(accuracy) / len(accuracy)) if isinstance(accuracy, list) else float(accuracy)


def reevaluation_path(results: Path) -> Path:
    return results.with_name(f"{results.stem}_reevaluation.csv")
