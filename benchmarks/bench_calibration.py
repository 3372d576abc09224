"""Which quantizer setting to ship: the workload's own search under each candidate calibration
and activation-quantizer setting, over several seeds, compared by the hypervolume of its front
(normalised as in the README's search table) and its best accuracy under bit budgets.

    python benchmarks/bench_calibration.py [WORKLOAD ...] [--seeds S] [--settings a,b]
        [--json PATH]

Every setting of one workload shares its trained weights, its minimum accuracy and its
reference point (the minimum accuracy, and the cost of every quantizer at its upper bound), so
hypervolumes compare directly. Each (setting, seed) calibrates on its own subset (the seed
draws it) into results/bench_calibration/ (kept: a second run reuses them) and runs the
workload's search (its strategy, the default `surrogate` unless it names another) with that
seed, as `explore` would. Budgets are fractions of the reference cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from prepared import prepared_context

from model_explorer.context import WorkloadContext
from model_explorer.exploration.explore import measure_baseline, minimum_accuracy
from model_explorer.exploration.explorer import Explorer
from model_explorer.exploration.strategies import build_strategy
from model_explorer.problems import build_problem
from model_explorer.quantization.pipeline import calibrate_workload
from model_explorer.results.front import ideal_box, indicator
from model_explorer.workload import Workload

# Candidate defaults: method/activation grid -> the `--set` overrides that make them.
SETTINGS = {
    "percentile/signed": ["calibration.method=percentile", "quantization.input.unsigned=false"],
    "percentile/auto": ["calibration.method=percentile", "quantization.input.unsigned=auto"],
    "max/auto": ["calibration.method=max", "quantization.input.unsigned=auto"],
    "mse/auto": ["calibration.method=mse", "quantization.input.unsigned=auto"],
    "entropy/auto": ["calibration.method=entropy", "quantization.input.unsigned=auto"],
    "max/asymmetric": ["calibration.method=max", "quantization.input.asymmetric=true"],
    "percentile/asymmetric": [
        "calibration.method=percentile",
        "quantization.input.asymmetric=true",
    ],
    "mse/asymmetric": ["calibration.method=mse", "quantization.input.asymmetric=true"],
}
BUDGETS = (0.3, 0.35, 0.4, 0.5, 0.625)  # 0.625: 5 bits per quantizer, what ResNet-20 needs


def run_setting(path: str, name: str, seed: int) -> tuple[list[tuple[float, float]], dict]:
    """The feasible (accuracy, cost) points of one search, and its problem's reference."""
    key = name.replace("/", "-")
    calibration = f"results/bench_calibration/{Path(path).stem}-{key}-{seed}.pt"
    overrides = [*SETTINGS[name], f"seed={seed}", f"calibration.file={calibration}"]
    workload = Workload.load(path, overrides=overrides)
    context = WorkloadContext(workload)
    calibrate_workload(context, if_missing=True)
    minimum = minimum_accuracy(workload.problem.options, measure_baseline(context))
    problem = build_problem(context, minimum)
    cost = next(o.name for o in problem.objectives if o.name != "accuracy")
    top = [int(v.upper) for v in problem.variables]
    reference = {"accuracy": min(minimum), "cost": problem.known_values(top)[cost]}
    spec = workload.exploration
    strategy = build_strategy(spec.strategy)
    result = Explorer(
        problem, spec.nsga, seed=seed, strategy=strategy, algorithm=spec.algorithm
    ).run()
    points = [(r["values"]["accuracy"], r["values"][cost]) for r in result.records if r["feasible"]]
    return points, reference


def hypervolume(points: list[tuple[float, float]], reference: dict) -> float:
    if not points:
        return 0.0
    senses = [("accuracy", True), ("cost", False)]
    front = np.array([(-a, c) for a, c in points], dtype=float)
    return float(indicator(senses, reference)(front)) / ideal_box(senses, reference)


def best_within(points: list[tuple[float, float]], budget: float) -> float | None:
    inside = [a for a, c in points if c <= budget]
    return max(inside) if inside else None


def _mean_sd(values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "none"
    spread = statistics.stdev(found) if len(found) > 1 else 0.0
    missing = "" if len(found) == len(values) else f" ({len(found)}/{len(values)})"
    return f"{statistics.mean(found):.4f} +- {spread:.4f}{missing}"


def summarise(path: str, runs: dict[str, list], reference: dict) -> None:
    cost = reference["cost"]
    print(f"\n{Path(path).stem}: reference accuracy {reference['accuracy']:.4f}, cost {cost:.1f}")
    budgets = " | ".join(f"best at <= {b * cost:.1f}" for b in BUDGETS)
    print(f"| setting | HV | {budgets} |")
    print("|---|---|" + "---|" * len(BUDGETS))
    for name, seeds in runs.items():
        volumes = [hypervolume(points, reference) for points in seeds]
        best = " | ".join(_mean_sd([best_within(p, b * cost) for p in seeds]) for b in BUDGETS)
        print(f"| {name} | {_mean_sd(volumes)} | {best} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=["workloads/digits_cnn.yaml"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names")
    parser.add_argument("--json", help="write every run's feasible points here")
    args = parser.parse_args()
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    everything = {}
    for path in args.workloads:
        prepared_context(path)  # trains the weights where missing
        runs: dict[str, list] = {}
        reference: dict = {}
        for name in names:
            runs[name] = []
            for seed in range(args.seeds):
                points, reference = run_setting(path, name, seed)
                runs[name].append(points)
                volume = hypervolume(points, reference)
                print(f"  {Path(path).stem} {name} seed {seed}: HV {volume:.4f}", flush=True)
        summarise(path, runs, reference)
        everything[path] = {"reference": reference, "runs": runs}
    if args.json:
        Path(args.json).write_text(json.dumps(everything))


if __name__ == "__main__":
    main()
