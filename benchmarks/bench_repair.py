"""How close `debug --target`'s repair comes to the cheapest repair, on a case small enough to
enumerate: digits_cnn with every quantizer between 2 and 4 bits (10 quantizers, 3^10 = 59,049
configurations), every configuration scored once on the exploration data. For parents and
targets, the repair (run on those recorded scores, counting the configurations it asks for)
against the cheapest configuration at least as wide as the parent everywhere that reaches the
target.

    python benchmarks/bench_repair.py [--low 2] [--high 4] [--parents 6]
"""

from __future__ import annotations

import argparse
import itertools
import random
import time

import numpy as np
from prepared import prepared_context

from model_explorer.analysis.debug.repair import AlreadyMeets, Unreachable, repair
from model_explorer.operations.rebuild import build_problem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="workloads/digits_cnn.yaml")
    parser.add_argument("--low", type=int, default=2)
    parser.add_argument("--high", type=int, default=4)
    parser.add_argument("--parents", type=int, default=6)
    args = parser.parse_args()
    overrides = [
        f"problem.num_bits_lower_limit={args.low}",
        f"problem.num_bits_upper_limit={args.high}",
    ]
    _, context = prepared_context(args.workload, overrides)
    problem = build_problem(context)
    genes = len(problem.variables)
    box = list(itertools.product(range(args.low, args.high + 1), repeat=genes))
    started = time.perf_counter()
    accuracy = {g: problem.measure(list(g)).values["accuracy"] for g in box}
    cost = {g: problem.known_values(list(g))["weighted_bits"] for g in box}
    seconds = time.perf_counter() - started
    print(f"{len(box)} configurations of {genes} quantizers scored in {seconds:.0f} s")
    baseline = max(accuracy.values())
    generator = random.Random(0)
    parents = [(args.low,) * genes] + [
        tuple(generator.randint(args.low, args.high - 1) for _ in range(genes))
        for _ in range(args.parents - 1)
    ]
    rows = []
    for parent in parents:
        for drop in (0.005, 0.01, 0.02, 0.04):
            target = baseline - drop
            asked: set = set()

            def measure(genome: tuple[int, ...], asked: set = asked) -> float:
                asked.add(genome)
                return accuracy[genome]

            try:
                found = repair(measure, cost.__getitem__, parent, [args.high] * genes, target)
            except (AlreadyMeets, Unreachable):
                continue
            wider = [g for g in box if all(a >= p for a, p in zip(g, parent, strict=True))]
            optimum = min(cost[g] for g in wider if accuracy[g] >= target)
            rows.append((parent, drop, found.cost, optimum, len(asked), len(wider)))
            print(
                f"parent {''.join(map(str, parent))} target -{100 * drop:.1f} points: repair "
                f"{found.cost:.0f} bits, optimum {optimum:.0f} ({found.cost / optimum - 1:+.1%}), "
                f"{len(asked)} of {len(wider)} configurations"
            )
    gaps = np.array([found / optimum - 1 for _, _, found, optimum, _, _ in rows])
    asked = np.array([a / w for *_, a, w in rows])
    print(
        f"{len(rows)} repairs: optimal in {int((gaps < 1e-9).sum())}, cost above the optimum "
        f"{gaps.mean():.1%} on average and {gaps.max():.1%} at most; "
        f"{asked.mean():.1%} of the enumerated configurations asked for on average"
    )


if __name__ == "__main__":
    main()
