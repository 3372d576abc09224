"""Latency as the search's currency, measured in one process on this machine.

`prediction`: for each workload and runtime, a latency table measured afresh, a short search
on [accuracy, latency], and its front timed whole after export (the search's own check):
how far the table's prediction lies from the measured time, member by member.

`searches`: whether pricing in measured latency pays: per seed, a search on [accuracy,
latency] and one on [accuracy, weighted_bits]; both fronts' members exported and timed whole
in the same runtime, interleaved, and scored on the reevaluation data no search selected on;
the hypervolume of each front in test accuracy x measured latency against one reference per
workload (the lowest test accuracy a member of either front reaches and 1.1 x the slowest
member).

    python benchmarks/bench_latency.py prediction [--workloads digits_cnn resnet20_digits
        resnet18_digits] [--runtimes onnxruntime openvino] [--threads 1] [--generations 6]
    python benchmarks/bench_latency.py searches [--workloads resnet20_digits resnet18_digits]
        [--runtime onnxruntime] [--seeds 5] [--generations 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from prepared import prepared_context

from model_explorer.operations.explore import ExploreOptions, explore
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads"


def prepared(name: str, overrides: list[str]) -> tuple[Workload, WorkloadContext]:
    return prepared_context(str(WORKLOADS / f"{name}.yaml"), overrides)


def latency_settings(runtime: str, threads: int, table: Path) -> str:
    return f"problem.latency={{runtime: '{runtime}', threads: {threads}, table: '{table}'}}"


def prediction(args: argparse.Namespace, folder: Path) -> None:
    print(
        "| workload | runtime | table: segments, whole graphs, seconds | front members: mean "
        "abs error, worst | 8 random configurations: mean abs error, worst |"
    )
    print("|---|---|---|---|---|")
    for name in args.workloads:
        for runtime in args.runtimes:
            table = folder / f"{name}_{runtime.replace(':', '_')}.json"
            overrides = [
                "problem.objectives=[accuracy, latency]",
                latency_settings(runtime, args.threads, table),
                f"exploration.nsga.generations={args.generations}",
            ]
            workload, context = prepared(name, overrides)
            started = time.perf_counter()
            result, _ = explore(
                workload,
                ExploreOptions(output=str(folder / f"{name}_{runtime}.pkl"), progress=False),
                context=context,
            )
            seconds = time.perf_counter() - started
            from model_explorer.latency.table import LatencyTable

            measured = LatencyTable.load(table, "table")
            segments = sum(len(e["times"]) for e in measured.layers.values())
            check = result.stats.get("latency_check", {})
            unseen = random_errors(workload, context, measured, runtime, args.threads)
            for member in result.pareto_front():
                timed = member.extra.get("latency", {})
                if timed:
                    print(
                        f"<!-- {name} {runtime} #{member.id}: predicted "
                        f"{timed['predicted_ms']:.4f} ms, measured {timed['median_ms']:.4f} ms -->"
                    )
            print(
                f"| {name} | {measured.machine['runtime']} {measured.machine['version']} | "
                f"{segments}, {len(measured.wholes)}, search and table {seconds:.0f} s | "
                f"{check.get('members', 0)}: {check.get('mean_abs_error', float('nan')):.1%}, "
                f"{check.get('worst_abs_error', float('nan')):.1%} | "
                f"{np.mean(unseen):.1%}, {max(unseen):.1%} |"
            )


def random_errors(workload, context, table, runtime: str, threads: int) -> list[float]:  # noqa: ANN001
    """The prediction's relative error on 8 configurations drawn at random from the search
    space (seeded), timed whole in one interleaved run."""
    import random

    from model_explorer.latency.running import time_plans
    from model_explorer.operations.latency import machine_of
    from model_explorer.operations.rebuild import build_problem
    from model_explorer.problems.options import LatencySettings

    problem = build_problem(context, None)
    draw = random.Random(1)
    plans = []
    for _ in range(8):
        genome = [draw.randint(int(v.lower), int(v.upper)) for v in problem.variables]
        plans.append(problem.plan(problem.configuration(genome)))
    _, make_runtime = machine_of(LatencySettings(runtime=runtime, threads=threads), "--runtime")
    example = next(iter(context.batches("exploration")))[0]
    timings = time_plans(problem.model, example, plans, make_runtime)
    return [
        abs(table.predict(p) - t.median) / t.median for p, t in zip(plans, timings, strict=True)
    ]


def front_points(result, problem, context) -> list[tuple[dict, float]]:  # noqa: ANN001
    """(plan, test accuracy) of each feasible front member."""
    points = []
    for member in result.pareto_front():
        if not member.feasible:
            continue
        plan = result.plan_of(member)
        problem.apply_plan(plan)
        points.append((plan, float(context.evaluate(problem.model, "reevaluate"))))
    return points


def hypervolume(points: np.ndarray, reference: tuple[float, float]) -> float:
    """Of (test accuracy, ms) points, accuracy maximised, time minimised."""
    from pymoo.indicators.hv import HV

    matrix = np.column_stack([-points[:, 0], points[:, 1]])
    return float(HV(ref_point=np.array([-reference[0], reference[1]]))(matrix))


def searches(args: argparse.Namespace, folder: Path) -> None:
    from model_explorer.latency.running import time_plans
    from model_explorer.operations.latency import machine_of
    from model_explorer.operations.rebuild import rebuild_problem
    from model_explorer.problems.options import LatencySettings

    for name in args.workloads:
        table = folder / f"{name}_{args.runtime.replace(':', '_')}.json"
        fronts: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for seed in range(args.seeds):
            plans, owners, accuracies = [], [], []
            for objective in ("latency", "weighted_bits"):
                overrides = [
                    f"seed={seed}",
                    # the seed draws the calibration subset: each seed's own file, here
                    f"calibration.file={folder / f'{name}_calibration_{seed}.pt'}",
                    f"problem.objectives=[accuracy, {objective}]",
                    latency_settings(args.runtime, args.threads, table),
                    f"exploration.nsga.generations={args.generations}",
                ]
                workload, context = prepared(name, overrides)
                output = folder / f"{name}_{objective}_{seed}.pkl"
                result, _ = explore(
                    workload, ExploreOptions(output=str(output), progress=False), context=context
                )
                problem = rebuild_problem(context, result.problem["name"], result.variable_names)
                for plan, accuracy in front_points(result, problem, context):
                    plans.append(plan)
                    owners.append(objective)
                    accuracies.append(accuracy)
            settings = LatencySettings(runtime=args.runtime, threads=args.threads)
            _, make_runtime = machine_of(settings, "--runtime")
            example = next(iter(context.batches("exploration")))[0]
            timings = time_plans(problem.model, example, plans, make_runtime, repeats=15)
            for owner, accuracy, timing in zip(owners, accuracies, timings, strict=True):
                fronts.setdefault((seed, owner), []).append((accuracy, timing.median))
        report(name, args, fronts)


def report(name: str, args: argparse.Namespace, fronts: dict) -> None:
    every = np.array([p for points in fronts.values() for p in points])
    reference = (float(every[:, 0].min()), float(every[:, 1].max()) * 1.1)
    print(
        f"\n{name} in {args.runtime} ({args.threads} thread(s)), {args.seeds} seeds, "
        f"{args.generations} generations; reference: test accuracy {reference[0]:.4f}, "
        f"{reference[1]:.4f} ms"
    )
    print("| seed | HV latency search | members | HV weighted_bits search | members |")
    print("|---|---|---|---|---|")
    values: dict[str, list[float]] = {"latency": [], "weighted_bits": []}
    for seed in range(args.seeds):
        row = [str(seed)]
        for objective in ("latency", "weighted_bits"):
            points = np.array(fronts.get((seed, objective), []))
            value = hypervolume(points, reference) if len(points) else 0.0
            values[objective].append(value)
            row += [f"{value:.5f}", str(len(points))]
        print("| " + " | ".join(row) + " |")
    for objective, found in values.items():
        spread = statistics.stdev(found) if len(found) > 1 else 0.0
        print(f"{objective}: HV {statistics.mean(found):.5f} +- {spread:.5f}")
    wins = sum(a > b for a, b in zip(values["latency"], values["weighted_bits"], strict=True))
    print(f"the latency search's front is larger in {wins} of {args.seeds} seeds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["prediction", "searches"])
    parser.add_argument("--workloads", nargs="+")
    parser.add_argument("--runtimes", nargs="+", default=["onnxruntime", "openvino"])
    parser.add_argument("--runtime", default="onnxruntime")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--generations", type=int, default=6)
    args = parser.parse_args()
    if args.workloads is None:
        args.workloads = (
            ["digits_cnn", "resnet20_digits", "resnet18_digits"]
            if args.part == "prediction"
            else ["resnet20_digits", "resnet18_digits"]
        )
    with tempfile.TemporaryDirectory(prefix="bench_latency_") as folder:
        (prediction if args.part == "prediction" else searches)(args, Path(folder))


if __name__ == "__main__":
    main()
