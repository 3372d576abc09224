"""Whether choosing the front on samples of its own holds up on held-out data: the search on
one half of the exploration samples, its feasible configurations re-scored on the other half
and the front chosen there, against the search on all of them; every front judged on the
workload's reevaluation data, at one reference point (the minimum accuracy of the whole
exploration data).

    python benchmarks/bench_front_selection.py [WORKLOAD] [--seeds S] [--strategy surrogate]

The halves are drawn once (seed 0); both arms of a seed run the same search seed, and the
two-stage arm spends no more exploration samples than the other has (half to search, half to
choose on). Prints bench_search_quality's held-out table for the three arms.
"""

from __future__ import annotations

import argparse

import bench_search_quality as bench
import torch
from prepared import prepared_context

from model_explorer.datasets.cache import TensorCache


def halves(cache: TensorCache) -> tuple[TensorCache, TensorCache]:
    """The exploration samples in two halves drawn once, each kept in dataset order."""
    order = torch.randperm(cache.num_samples, generator=torch.Generator().manual_seed(0))
    first, second = order[: cache.num_samples // 2], order[cache.num_samples // 2 :]
    kept = [part.sort().values for part in (first, second)]
    return tuple(TensorCache(cache.inputs[i], cache.targets[i], cache.batch_size) for i in kept)


def chosen_on(run: bench.Run, problem, cost: str) -> bench.Run:  # noqa: ANN001
    """The run's feasible configurations re-scored on `problem.batches`: a Run that starts
    with what the search spent, its front the one chosen on these samples."""
    scorer = bench.Scorer(problem, cost)
    scorer.run.add(run.forwards, 0.0, 0.0, False)
    feasible = (g for (_, _, _, ok), g in zip(run.points, run.genomes, strict=True) if ok and g)
    for genome in dict.fromkeys(feasible):
        scorer(list(genome))
    return scorer.run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/digits_cnn.yaml")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--strategy", default="surrogate")
    args = parser.parse_args()
    workload, context = prepared_context(args.workload)
    problem, cost, reference = bench.judged_problem(workload, context)
    whole = problem.batches
    search_half, choice_half = halves(whole)
    nsga = workload.exploration.nsga
    arms = (
        "search on half the samples",
        "the same, front chosen on the other half",
        "search on all",
    )
    runs: dict[str, list[bench.Run]] = {arm: [] for arm in arms}
    for s in range(args.seeds):
        problem.batches = search_half
        half = bench.search(problem, nsga, args.strategy, workload.seed + s, cost)
        problem.batches = choice_half
        runs[arms[0]].append(half)
        runs[arms[1]].append(chosen_on(half, problem, cost))
        problem.batches = whole
        runs[arms[2]].append(bench.search(problem, nsga, args.strategy, workload.seed + s, cost))
    held = bench.judge_held_out(runs, problem, context, reference.higher)
    budgets = [fraction * reference.cost for fraction in bench.BUDGETS]
    print(
        f"{workload.name}: {whole.num_samples} exploration samples, halves of "
        f"{search_half.num_samples} and {choice_half.num_samples}; {args.seeds} seeds"
    )
    bench.held_out_tables(runs, reference, budgets, held)


if __name__ == "__main__":
    main()
