"""Search quality at an equal evaluation budget on one workload: hypervolume of the feasible
accuracy / cost front found by random search, uniform bit widths, the greedy sensitivity path
alone, NSGA-II with random initialization and NSGA-II seeded from the sensitivity table.

    python benchmarks/bench_search_quality.py [WORKLOAD] [--budget N] [--repeats R]

All methods share one problem (the workload's, with its minimum accuracy) and one reference
point (the minimum accuracy, and the cost of every quantizer at its upper bound), so their
hypervolumes compare directly. The sensitivity table's evaluations count against the budget
of the methods that use it. The workload's checkpoint and calibration are made if missing.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from prepared import prepared_context
from pymoo.indicators.hv import HV

from model_explorer.exploration.explore import measure_baseline, minimum_accuracy
from model_explorer.exploration.explorer import Explorer
from model_explorer.problems import PROBLEMS
from model_explorer.quantization.sensitivity import greedy_configurations, layer_sensitivity


class Scorer:
    """Evaluates configurations of the problem and keeps (accuracy, cost, feasible)."""

    def __init__(self, problem, cost: str) -> None:  # noqa: ANN001
        self.problem = problem
        self.cost = cost
        self.points: list[tuple[float, float, bool]] = []

    def __call__(self, genome) -> None:  # noqa: ANN001
        _, evaluation = self.problem.evaluate(np.asarray(genome, dtype=float))
        self.points.append(
            (
                evaluation.values["accuracy"],
                evaluation.values[self.cost],
                self.problem.feasible(evaluation.values),
            )
        )


def hypervolume(points, reference: tuple[float, float]) -> float:  # noqa: ANN001
    """Hypervolume of the feasible (accuracy up, cost down) points, normalised by the box
    between the reference point and (accuracy 1, cost 0)."""
    feasible = np.array([(-a, c) for a, c, ok in points if ok], dtype=float).reshape(-1, 2)
    if not len(feasible):
        return 0.0
    ref = np.array([-reference[0], reference[1]])
    box = (1.0 - reference[0]) * reference[1]
    return float(HV(ref_point=ref)(feasible)) / box


def explore_points(problem, nsga, seed: int, cost: str) -> list[tuple[float, float, bool]]:  # noqa: ANN001
    result = Explorer(problem, nsga, seed=seed).run()
    return [(i.values["accuracy"], i.values[cost], i.feasible) for i in result.individuals]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/digits_cnn.yaml")
    parser.add_argument("--budget", type=int, default=160, help="evaluations per method")
    parser.add_argument("--repeats", type=int, default=10, help="seeds of the random methods")
    args = parser.parse_args()

    workload, context = prepared_context(args.workload)
    spec = workload.exploration
    minimum = minimum_accuracy(spec, measure_baseline(context))
    problem = PROBLEMS.get(workload.problem.problem_function).builder(context, minimum)
    cost = next(o.name for o in problem.objectives if o.name != "accuracy")
    low = min(int(v.lower) for v in problem.variables)
    high = max(int(v.upper) for v in problem.variables)
    bounds = [(int(v.lower), int(v.upper)) for v in problem.variables]
    top = Scorer(problem, cost)
    top([b for _, b in bounds])
    reference = (min(minimum) if minimum else 0.0, top.points[0][1])
    pop = spec.nsga.pop_size
    offsprings = spec.nsga.offsprings or pop

    def nsga(budget: int):  # noqa: ANN202
        generations = max(1, (budget - pop) // offsprings)
        return spec.nsga.model_copy(update={"generations": generations})

    table = layer_sensitivity(problem.model, problem.batches, problem.metric, low)
    table_cost = len(table.rows) + 1
    path = greedy_configurations(table, bounds)

    rows: dict[str, tuple[list[float], int]] = {}

    def add(name: str, value: float, evaluations: int) -> None:
        values, _ = rows.get(name, ([], 0))
        rows[name] = ([*values, value], evaluations)

    uniform = Scorer(problem, cost)
    for bits in range(low, high + 1):
        uniform([min(max(bits, lo), hi) for lo, hi in bounds])
    add("uniform bit widths", hypervolume(uniform.points, reference), high - low + 1)

    greedy = Scorer(problem, cost)
    for genome in path:
        greedy(genome)
    add("greedy sensitivity path", hypervolume(greedy.points, reference), table_cost + len(path))

    for repeat in range(args.repeats):
        seed = workload.seed + repeat
        rng = np.random.default_rng(seed)
        random = Scorer(problem, cost)
        for _ in range(args.budget):
            random([rng.integers(lo, hi + 1) for lo, hi in bounds])
        add("random search", hypervolume(random.points, reference), args.budget)

        problem.seeds = []
        points = explore_points(problem, nsga(args.budget), seed, cost)
        add("NSGA-II, random start", hypervolume(points, reference), len(points))

        problem.seed_from_sensitivity(pop // 2)
        points = explore_points(problem, nsga(args.budget - table_cost), seed, cost)
        add("NSGA-II, sensitivity seeds", hypervolume(points, reference), table_cost + len(points))
        problem.seeds = []

    print(
        f"{workload.name}: {len(bounds)} quantizers, bits {low}-{high}, objectives accuracy / "
        f"{cost}, reference point accuracy {reference[0]:.4f}, {cost} {reference[1]:.0f}; "
        f"{args.repeats} seeds"
    )
    print(f"{'method':30s} {'evaluations':>11s} {'hypervolume (mean +- sd)':>26s}")
    for name, (values, evaluations) in rows.items():
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{name:30s} {evaluations:11d} {statistics.mean(values):17.4f} +- {spread:.4f}")


if __name__ == "__main__":
    main()
