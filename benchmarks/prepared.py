"""The start of the benchmarks that run a workload: its checkpoint and calibration made first
when missing, as `make run` makes them."""

from __future__ import annotations

from collections.abc import Sequence

from model_explorer.context import WorkloadContext
from model_explorer.memory import keep_freed_memory
from model_explorer.operations.pipeline import calibrate_workload
from model_explorer.retraining import train_baseline
from model_explorer.workload import Workload


def prepared_context(path: str, overrides: Sequence[str] = ()) -> tuple[Workload, WorkloadContext]:
    """The workload (with `overrides`, KEY=VALUE as --set takes them) and its context, trained
    (unless its model ships weights) and calibrated (where it quantizes); the process's
    allocator set as the command line sets it (memory.keep_freed_memory), so that times are
    what a search sees."""
    keep_freed_memory()
    workload = Workload.load(path, overrides=overrides)
    context = WorkloadContext(workload)
    weights = workload.model.weights
    if weights is not None and not workload.model.resolve(weights).is_file():
        train_baseline(context, progress=False)
    if workload.calibration is not None:  # a sparsity workload has none
        calibrate_workload(context, if_missing=True)
    return workload, context
