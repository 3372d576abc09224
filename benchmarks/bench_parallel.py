"""Speed-up of parallel evaluation over serial evaluation on one search, in one process.

    python benchmarks/bench_parallel.py [WORKLOAD] [--runner processes|dask] [--workers 1 2 4]

The workload's search is made heavy enough for evaluation to dominate: every candidate is
scored on the whole digits set (1797 samples, no early rejection), 24 + 20 x 24 genomes
(`--generations`). Each run's wall time includes starting the workers and building the problem
in each of them. The baseline checkpoint and calibration file are made first if missing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from prepared import prepared_context

from model_explorer.datasets import DatasetSpec
from model_explorer.exploration.runners import RunnerSpec
from model_explorer.operations.explore import ExploreOptions, explore
from model_explorer.results import ExplorationResult
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def heavy(workload: Workload, generations: int) -> Workload:
    data = workload.to_dict()
    data["workload"]["problem"]["early_reject"] = False
    spec = Workload.from_dict(data)
    exploration = spec.exploration
    exploration.datasets.exploration = DatasetSpec.model_validate(
        {"type": "digits", "split": "all", "batch_size": 600}
    )
    exploration.nsga = exploration.nsga.model_copy(
        update={"pop_size": 24, "offsprings": 24, "generations": generations}
    )
    return spec


def comparable(result: ExplorationResult) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in result.records]


def timed(workload: Workload, runner: RunnerSpec, folder: Path) -> tuple[float, ExplorationResult]:
    spec = workload.model_copy(deep=True)
    spec.exploration.runner = runner
    workers = runner.options.workers if runner.options is not None else 1
    output = folder / f"{runner.type}_{workers}.pkl"
    started = time.perf_counter()
    result, _ = explore(spec, ExploreOptions(output=str(output)), context=WorkloadContext(spec))
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/digits_cnn.yaml")
    parser.add_argument("--runner", choices=["processes", "dask"], default="processes")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--generations", type=int, default=20, help="after the first; each asks 24 genomes"
    )
    args = parser.parse_args()
    workload, _ = prepared_context(args.workload)
    workload = heavy(workload, args.generations)
    with tempfile.TemporaryDirectory() as folder:
        serial, reference = timed(workload, RunnerSpec(), Path(folder))
        evaluations = reference.stats["evaluations"]
        print(
            f"workload {workload.name}: {evaluations} evaluations of 1797 samples each, "
            f"{os.cpu_count()} CPU cores"
        )
        print(f"serial: {serial:6.2f} s")
        for workers in args.workers:
            runner = RunnerSpec(type=args.runner, workers=workers)
            seconds, result = timed(workload, runner, Path(folder))
            same = "same result" if comparable(result) == comparable(reference) else "DIFFERENT"
            print(
                f"{args.runner}, {workers} worker{'s' if workers > 1 else ''}: {seconds:6.2f} s, "
                f"speed-up {serial / seconds:.2f}x ({same})"
            )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
