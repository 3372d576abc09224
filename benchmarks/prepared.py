"""What several benchmarks share: the start of those that run a workload (its checkpoint and
calibration made first when missing, as `make run` makes them), and the median time of a call."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from model_explorer.memory import keep_freed_memory
from model_explorer.operations.pipeline import calibrate_workload
from model_explorer.operations.retraining import train_baseline
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


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


def random_candidates(path: str, candidates: int) -> tuple[Any, ...]:
    """(workload, context, problem, float model, exploration batches, genomes): the workload
    prepared (`prepared_context`), its problem, and `candidates` random genomes of it (seed 0),
    what the benchmarks that time candidates start from."""
    import numpy as np

    from model_explorer.operations.rebuild import build_problem

    workload, context = prepared_context(path)
    problem = build_problem(context)
    rng = np.random.default_rng(0)
    genomes = [
        [rng.integers(v.lower, v.upper + 1) for v in problem.variables] for _ in range(candidates)
    ]
    return (
        workload,
        context,
        problem,
        context.build_model(),
        context.batches("exploration"),
        genomes,
    )


def median_seconds(function: Callable[[], Any], repeats: int) -> float:
    """The median time of `repeats` calls of `function`, after one warm-up call."""
    function()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
