"""Several runs of one workload: merged into one result, or compared side by side."""

from __future__ import annotations

import copy
import json
from typing import Any

from model_explorer.errors import UserError
from model_explorer.results.result import ExplorationResult


def _configuration_key(record: dict[str, Any]) -> str:
    return json.dumps(record["configuration"])


def _searched(workload: dict[str, Any]) -> dict[str, Any]:
    """What a run searched: its workload less what differs between runs of one search, the
    seed, the file its ranges were kept in (a Python search keeps them beside its result) and
    the folder its relative paths started from (`root`, stored absolute: another clone, or
    the project moved, is the same search, as `--resume` holds too)."""
    body = copy.deepcopy(workload.get("workload", workload))
    for key in ("seed", "root"):
        body.pop(key, None)
    if isinstance(body.get("calibration"), dict):
        body["calibration"].pop("file", None)
    return body


def merge_results(results: list[ExplorationResult]) -> ExplorationResult:
    """One result holding every individual of several runs of the same workload and problem
    once (the first evaluation of a configuration is kept); ids are renumbered in order and
    each record remembers its run in `extra['run']`."""
    if not results:
        raise UserError("merge: no result files given")
    first = results[0]
    for other in results[1:]:
        if (
            _searched(other.workload) != _searched(first.workload)
            or other.problem["variables"] != first.problem["variables"]
        ):
            raise UserError("merge: the result files come from different workloads or problems")
    seen: set[str] = set()
    records = []
    for run, result in enumerate(results):
        for record in result.records:
            key = _configuration_key(record)
            if key in seen:
                continue
            seen.add(key)
            records.append({**record, "id": len(records), "extra": {**record["extra"], "run": run}})
    # counts add up; what describes one run (its sensitivity start's tables) stays with it
    counts = [key for key, value in first.stats.items() if isinstance(value, (int, float))]
    stats = {key: sum(r.stats.get(key, 0) for r in results) for key in counts}
    stats["evaluations"] = len(records)
    return ExplorationResult(
        first.workload,
        first.problem,
        first.baseline,
        records,
        [],
        stats,
        complete=all(r.complete for r in results),
        seed=first.seed,
    )


def compare_results(
    results: dict[str, ExplorationResult],
    reference: dict[str, float] | None = None,
    objectives: list[str] | None = None,
):  # noqa: ANN201
    """One row per run: evaluations, feasible share, front size, hypervolume against one common
    reference point (default: the first run's), and time spent evaluating."""
    import pandas as pd

    names = list(results)
    if reference is None:
        reference = results[names[0]].default_reference(objectives)
    rows = []
    for name, result in results.items():
        rows.append(
            {
                "run": name,
                "evaluations": len(result),
                "feasible": len(result.feasible()),
                "feasible_share": len(result.feasible()) / len(result) if len(result) else 0.0,
                "front": len(result.pareto_front(list(reference))),
                "hypervolume": result.hypervolume(reference, list(reference)),
                "seconds": sum(r["seconds"] for r in result.records),
            }
        )
    return pd.DataFrame(rows)
