"""The start of the benchmarks that run a workload: its checkpoint and calibration made first
when missing, as `make run` makes them."""

from __future__ import annotations

from model_explorer.context import WorkloadContext
from model_explorer.quantization.pipeline import calibrate_workload
from model_explorer.retraining import train_baseline
from model_explorer.schema import resolve_path
from model_explorer.workload import Workload


def prepared_context(path: str) -> tuple[Workload, WorkloadContext]:
    workload = Workload.load(path)
    context = WorkloadContext(workload)
    if not resolve_path(workload.model.weights).is_file():
        train_baseline(context, progress=False)
    calibrate_workload(context, if_missing=True)
    return workload, context
