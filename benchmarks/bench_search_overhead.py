"""The search's own work against its evaluations as a search grows longer: wall time of the
whole search, the seconds its evaluations took (the model's forwards), and the rest (the
surrogate's fits and picks, NSGA-II, the result file), for the `surrogate` strategy at several
generation counts, with the surrogate as it is and, in the same process, as it was before it
kept a window of records and its kernels between generations and computed two objectives'
gains in closed form (every fit on every record, its hyperparameters optimised afresh, pymoo's
indicator called for each gain).

    python benchmarks/bench_search_overhead.py [WORKLOAD] [--generations 25,100,300]
        [--evaluations 4] [--seed 0] [--without-before]

With `--evaluations N` the strategy evaluates N of its proposals per generation (4 by
default): 300 generations of 4 are some 1,200 evaluations, of 8 some 2,400.
"""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager

from prepared import prepared_context

import model_explorer.exploration.surrogate as surrogate
from model_explorer.exploration.explorer import Explorer
from model_explorer.exploration.strategies import StrategySpec, build_strategy
from model_explorer.operations.explore import measure_baseline, minimum_accuracy
from model_explorer.operations.rebuild import build_problem


@contextmanager
def as_before():
    """The surrogate before its window, kept kernels and closed-form gains: every record, its
    hyperparameters optimised each time, pymoo's indicator called for each point's gain."""
    kept = surrogate.WINDOW, surrogate.REOPTIMISE, surrogate.CLOSED_FORM
    surrogate.WINDOW, surrogate.REOPTIMISE, surrogate.CLOSED_FORM = 10**9, 0.0, False
    try:
        yield
    finally:
        surrogate.WINDOW, surrogate.REOPTIMISE, surrogate.CLOSED_FORM = kept


def timed_search(problem, nsga, strategy, seed: int) -> dict:  # noqa: ANN001
    started = time.perf_counter()
    result = Explorer(problem, nsga, seed=seed, strategy=strategy).run()
    wall = time.perf_counter() - started
    evaluating = sum(r["seconds"] for r in result.records)
    return {
        "evaluations": len(result.records),
        "cache hits": result.stats["cache_hits"],
        "wall": wall,
        "evaluating": evaluating,
        "overhead": wall - evaluating,
        "hypervolume": result.normalised_hypervolume(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/digits_cnn.yaml")
    parser.add_argument("--generations", default="25,100,300")
    parser.add_argument("--evaluations", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--without-before", action="store_true")
    args = parser.parse_args()
    workload, context = prepared_context(args.workload)
    minimum = minimum_accuracy(workload.problem.options, measure_baseline(context))
    problem = build_problem(context, minimum)
    spec = StrategySpec.model_validate({"type": "surrogate", "evaluations": args.evaluations})
    strategy = build_strategy(spec)
    print(
        "| generations | surrogate | evaluations | cache hits | wall s | evaluating s | "
        "overhead s | overhead / evaluating | HV |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for generations in [int(g) for g in args.generations.split(",")]:
        nsga = workload.exploration.nsga.model_copy(update={"generations": generations})
        arms = [("now", None)] + ([] if args.without_before else [("before", as_before)])
        for name, context_manager in arms:
            if context_manager is None:
                found = timed_search(problem, nsga, strategy, args.seed)
            else:
                with context_manager():
                    found = timed_search(problem, nsga, strategy, args.seed)
            print(
                f"| {generations} | {name} | {found['evaluations']:,} | "
                f"{found['cache hits']:,} | {found['wall']:.1f} | {found['evaluating']:.1f} | "
                f"{found['overhead']:.1f} | {found['overhead'] / found['evaluating']:.2f} | "
                f"{found['hypervolume']:.4f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
