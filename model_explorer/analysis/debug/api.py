"""The debug command as calls: `debug("results/x.pkl#7")` gives the DebugReport of an
individual, `repair("results/x.pkl#7", target=0.98)` appends its repaired individual to the
result and says what it raised. The command line runs these. `debug_search(found, member)`
gives the same report for a search of objects (`model_explorer.search`), which no command can
rebuild."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_explorer.analysis.debug.individual import (
    DebugReport,
    debug_individual,
    repair_individual,
    target_of,
)
from model_explorer.analysis.debug.repair import Repair
from model_explorer.metrics.functions import higher_is_better


def _opened(reference: str, workload: str | Path | None, where: str) -> tuple[Any, Any, Any]:
    """(context, result, individual) of `RESULTS#ID`, on the result's stored workload unless
    `workload` names a file (which must describe the same model)."""
    from model_explorer.operations.reevaluate import check_same_model
    from model_explorer.results import load_individual
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    result, individual = load_individual(reference, where)
    if workload is None:
        loaded = Workload.from_dict(result.workload, source="the result's stored workload")
    else:
        loaded = Workload.load(workload)
        check_same_model(loaded, result)
    return WorkloadContext(loaded), result, individual


def debug(
    reference: str,
    workload: str | Path | None = None,
    runtimes: list[str] | tuple[str, ...] = ("onnxruntime",),
    samples: int | None = 256,
) -> DebugReport:
    """Per layer of the individual `RESULTS#ID`: its SQNRs in PyTorch and in each of
    `runtimes` on its exported file (on the first `samples` exploration samples) and its
    accuracy restored to float (render.py writes the table, the figure and the summary)."""
    context, result, individual = _opened(reference, workload, "RESULTS#ID")
    return debug_individual(context, result, individual, runtimes, samples)


@dataclass
class Repaired:
    """A repair appended to its result: the new individual's id and record, the search that
    found it, the cost objective it kept low, and the result file it was written to."""

    id: int
    record: dict[str, Any]
    search: Repair
    cost: str
    target: float
    path: Path


def repair(
    reference: str,
    target: float | None = None,
    drop: float | None = None,
    workload: str | Path | None = None,
) -> Repaired:
    """Raise the fewest, cheapest quantizers of `RESULTS#ID` (to wider choices its genes
    allow) until it reaches `target` (or the float accuracy less `drop`) on the exploration
    data, and append the repaired individual to the result file, marked with its parent."""
    context, result, individual = _opened(reference, workload, "RESULTS#ID")
    metric = result.problem.get("metric", "top1")
    goal = target_of(result, target, drop, higher_is_better(metric))
    found, record, cost = repair_individual(context, result, individual, goal)
    record = {"id": len(result.records), **record}
    result.records.append(record)
    path = Path(reference.rpartition("#")[0])
    result.save(path)
    return Repaired(record["id"], record, found, cost, goal, path)


def debug_search(
    found: Any,
    individual: Any,
    runtimes: list[str] | tuple[str, ...] = ("onnxruntime",),
    samples: int | None = 256,
) -> DebugReport:
    """The DebugReport of a member (or id) of `found`, the Search that `model_explorer.search`
    or `model_explorer.load` returned: per quantized layer its SQNRs in PyTorch and in each of
    `runtimes` on its exported file (an empty tuple: PyTorch's alone), on the first `samples`
    exploration samples; `render.text(report)` prints it as `model-explorer debug` does."""
    from model_explorer.deployment.runtimes import file_runtimes

    file_runtimes(runtimes, "debug_search(runtimes=...)")
    chosen = found._individual(individual)
    return debug_individual(found.context, found.result, chosen, runtimes, samples, "individual")
