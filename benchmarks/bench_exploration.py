"""Cost of one candidate evaluation relative to a plain float forward pass over the same
exploration subset, and the evaluations the cache and early rejection save, in one process.

    python benchmarks/bench_exploration.py [WORKLOAD]

The workload's baseline checkpoint and calibration file are made first if missing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from prepared import prepared_context

from model_explorer.metrics.functions import evaluate
from model_explorer.operations.explore import ExploreOptions, explore
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def interleaved_times(context: WorkloadContext, result) -> tuple[float, float]:
    """Median seconds of a candidate evaluation (full, no early rejection; a fresh model, so
    weights are quantized as the search first meets each bit width) and of a float forward
    pass over the same subset, timed alternately for every recorded candidate in order."""
    from model_explorer.operations.rebuild import build_problem

    problem = build_problem(context, None, result.problem["name"])
    model = context.build_model()
    batches = context.batches("exploration")
    candidates, floats = [], []
    for record in result.records:
        started = time.perf_counter()
        problem.evaluate(record["genome"])
        candidates.append(time.perf_counter() - started)
        started = time.perf_counter()
        evaluate(model, batches, context.workload.metric)
        floats.append(time.perf_counter() - started)
    return statistics.median(candidates), statistics.median(floats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/digits_cnn.yaml")
    args = parser.parse_args()
    workload, context = prepared_context(args.workload)
    runs = {}
    for early in (False, True):
        data = workload.to_dict()
        data["workload"]["problem"]["early_reject"] = early
        spec = Workload.from_dict(data)
        output = f"/tmp/bench_exploration_{early}.pkl"
        result, path = explore(spec, ExploreOptions(output=output), context=context)
        path.unlink()
        runs[early] = result
    per_candidate, reference = interleaved_times(context, runs[False])
    total = context.batches("exploration").num_samples
    early = runs[True]
    rejected = [r for r in early.records if not r["complete"] and r["extra"]["finite"]]
    samples_saved = sum(total - r["extra"]["samples"] for r in rejected)
    asked = early.stats["evaluations"] + early.stats["cache_hits"]
    threads = torch.get_num_threads()
    print(f"workload {workload.name}: {total} samples, {context.device}, {threads} threads")
    print(f"float forward over the subset:   {reference * 1e3:8.2f} ms")
    ratio = per_candidate / reference
    print(f"candidate evaluation (median):   {per_candidate * 1e3:8.2f} ms  = {ratio:.2f}x float")
    print(f"genomes asked by NSGA-II:        {asked}")
    print(f"answered by the cache:           {early.stats['cache_hits']}")
    print(
        f"rejected early:                  {len(rejected)} candidates, "
        f"{samples_saved} of {len(rejected) * total} of their samples skipped"
    )
    evaluating = sum(r["seconds"] for r in early.records)
    print(f"time spent evaluating:           {evaluating:.2f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
