"""Which quantizer setting to ship: the workload's own search under each candidate calibration
and activation-quantizer setting, over several seeds, compared by the hypervolume of its front
(normalised as in the search table of docs/performance-search.md) and its best accuracy under
bit budgets.

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
from pathlib import Path

from bench_search_quality import Run, best_within, hypervolume, mean_sd, search
from prepared import prepared_context

from model_explorer.operations.explore import measure_baseline, minimum_accuracy
from model_explorer.operations.pipeline import calibrate_workload
from model_explorer.operations.rebuild import build_problem
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload

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


def run_setting(path: str, name: str, seed: int) -> tuple[Run, tuple[float, float]]:
    """One search's evaluations, and its problem's reference point (accuracy, cost)."""
    key = name.replace("/", "-")
    calibration = f"results/bench_calibration/{Path(path).stem}-{key}-{seed}.pt"
    overrides = [*SETTINGS[name], f"seed={seed}", f"calibration.file={calibration}"]
    workload = Workload.load(path, overrides=overrides)
    context = WorkloadContext(workload)
    calibrate_workload(context, if_missing=True)
    minimum = minimum_accuracy(workload.problem.options, measure_baseline(context))
    problem = build_problem(context, minimum)
    cost = next(o.name for o in problem.objectives if o.name not in ("accuracy", "kl"))
    top = [int(v.upper) for v in problem.variables]
    reference = (min(minimum), problem.known_values(top)[cost])
    spec = workload.exploration
    run = search(problem, spec.nsga, spec.strategy, seed, cost, spec.algorithm)
    return run, reference


def summarise(path: str, runs: dict[str, list[Run]], reference: tuple[float, float]) -> None:
    cost = reference[1]
    print(f"\n{Path(path).stem}: reference accuracy {reference[0]:.4f}, cost {cost:.1f}")
    budgets = " | ".join(f"best at <= {b * cost:.1f}" for b in BUDGETS)
    print(f"| setting | HV | {budgets} |")
    print("|---|---|" + "---|" * len(BUDGETS))
    for name, seeds in runs.items():
        volumes = [hypervolume(run.points, reference) for run in seeds]
        best = " | ".join(
            mean_sd([best_within(run.points, b * cost) for run in seeds]) for b in BUDGETS
        )
        print(f"| {name} | {mean_sd(volumes)} | {best} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=["workloads/digits_cnn.yaml"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated names")
    parser.add_argument("--json", help="write every run's points here")
    args = parser.parse_args()
    names = [n.strip() for n in args.settings.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}")
    everything = {}
    for path in args.workloads:
        prepared_context(path)  # trains the weights where missing
        runs: dict[str, list[Run]] = {}
        reference = (0.0, 0.0)
        for name in names:
            runs[name] = []
            for seed in range(args.seeds):
                run, reference = run_setting(path, name, seed)
                runs[name].append(run)
                volume = hypervolume(run.points, reference)
                print(f"  {Path(path).stem} {name} seed {seed}: HV {volume:.4f}", flush=True)
        summarise(path, runs, reference)
        points = {name: [run.points for run in seeds] for name, seeds in runs.items()}
        everything[path] = {"reference": reference, "runs": points}
    if args.json:
        Path(args.json).write_text(json.dumps(everything))


if __name__ == "__main__":
    main()
