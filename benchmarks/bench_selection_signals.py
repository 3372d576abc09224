"""Which signal measured on the exploration data predicts a configuration's held-out top-1:
a pool of configurations (every genome of several searches ranked by top-1 and by the
divergence from the float model, and uniform widths), each scored sample by sample on the
exploration data, the held-out data and, where the workload trains, the training data; the rank
correlation (Spearman) of each signal with held-out top-1 and held-out KL over the
configurations feasible on the exploration data; and the front each signal chooses among the
same candidates of each search, judged on the held-out data.

    python benchmarks/bench_selection_signals.py [WORKLOAD] [--seeds 5]

For a classifier whose metric counts labels (top-1). The training data's divergence needs no
labels; it is the float model's own training data, where its outputs are surest.
"""

from __future__ import annotations

import argparse

import bench_search_quality as bench
import numpy as np
import torch
from prepared import prepared_context
from scipy.stats import spearmanr

from model_explorer.metrics.classes import kl_per_sample


def stacked(cache) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
    inputs, targets = zip(*cache, strict=True)
    return torch.cat(inputs), torch.cat(targets)


@torch.no_grad()
def outputs(model, inputs: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    return torch.cat([model(inputs[i : i + 512]) for i in range(0, len(inputs), 512)])


def per_sample(problem, genomes, splits, float_outputs) -> dict:  # noqa: ANN001
    """Per split: each genome's per-sample hits and divergences, and the cross-entropy."""
    found = {split: {"hits": [], "kl": [], "ce": [], "agree": []} for split in splits}
    for genome in genomes:
        problem.apply(problem.configuration(np.asarray(genome, dtype=float)))
        for split, (inputs, labels) in splits.items():
            scores = outputs(problem.model, inputs)
            reference = float_outputs[split]
            found[split]["hits"].append((scores.argmax(1) == labels).numpy())
            found[split]["kl"].append(kl_per_sample(scores, reference).numpy())
            log_q = scores.log_softmax(1)
            found[split]["ce"].append((-log_q.gather(1, labels[:, None])[:, 0]).numpy())
            found[split]["agree"].append((scores.argmax(1) == reference.argmax(1)).numpy())
    return {split: {k: np.array(v) for k, v in kinds.items()} for split, kinds in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/digits_cnn.yaml")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    workload, context = prepared_context(args.workload)
    nsga = workload.exploration.nsga
    sources: dict[tuple[int, ...], set[str]] = {}
    problems = {}
    for ranking in ("accuracy", "kl"):
        workload_r, context_r = prepared_context(args.workload, [f"problem.selection={ranking}"])
        problem, cost, reference = bench.judged_problem(workload_r, context_r)
        problems[ranking] = problem
        for seed in range(args.seeds):
            run = bench.search(problem, nsga, "surrogate", workload.seed + seed, cost)
            for genome in run.genomes:
                if genome is not None:
                    sources.setdefault(genome, set()).add(f"{ranking}{seed}")
    problem = problems["accuracy"]
    bounds = [(int(v.lower), int(v.upper)) for v in problem.variables]
    for bits in range(min(b for b, _ in bounds), max(h for _, h in bounds) + 1):
        genome = tuple(min(max(bits, low), high) for low, high in bounds)
        sources.setdefault(genome, set()).add("uniform")
    splits = {
        "exploration": stacked(problem.batches),
        "held-out": stacked(context.batches("reevaluate")),
    }
    if context.has_dataset("train"):
        splits["train"] = stacked(context.loader("train"))
    float_model = context.build_model().eval()
    float_outputs = {split: outputs(float_model, x) for split, (x, _) in splits.items()}
    genomes = list(sources)
    costs = np.array([problem.known_values(list(g))[cost] for g in genomes])
    found = per_sample(problem, genomes, splits, float_outputs)
    explored, held = found["exploration"], found["held-out"]
    accuracy, held_accuracy = explored["hits"].mean(1), held["hits"].mean(1)
    feasible = accuracy >= reference.accuracy
    signals = {
        "top-1": -accuracy,
        "cross-entropy against the labels": explored["ce"].mean(1),
        "top-1 agreement with the float model": -explored["agree"].mean(1),
        "median KL divergence from the float model": np.median(explored["kl"], 1),
        "mean KL divergence from the float model": explored["kl"].mean(1),
    }
    if "train" in found:
        signals["mean KL on the training data"] = found["train"]["kl"].mean(1)
    labels = splits["held-out"][1]
    held_float = float((float_outputs["held-out"].argmax(1) == labels).float().mean())
    print(
        f"{workload.name}: {len(genomes)} configurations, {int(feasible.sum())} feasible on "
        f"the exploration data; the float model {held_float:.4f} held out"
    )
    print("| signal on the exploration data | with held-out top-1 | with held-out KL |")
    print("|---|---|---|")
    held_kl = held["kl"].mean(1)
    for name, signal in signals.items():
        with_top1 = spearmanr(signal[feasible], -held_accuracy[feasible])[0]
        with_kl = spearmanr(signal[feasible], held_kl[feasible])[0]
        print(f"| {name} | {with_top1:.2f} | {with_kl:.2f} |")
    print("\nThe front each signal chooses among each search's feasible candidates, held out:")
    print("| candidates of | chosen by | HV held-out |")
    print("|---|---|---|")
    for ranking in ("accuracy", "kl"):
        for name in ("top-1", "mean KL divergence from the float model"):
            hvs = []
            for seed in range(args.seeds):
                run = bench.Run()
                for index, genome in enumerate(genomes):
                    if f"{ranking}{seed}" in sources[genome] and feasible[index]:
                        rank = signals[name][index]
                        run.add(0, float(accuracy[index]), float(costs[index]), True, genome, rank)
                held_scores = {g: float(held_accuracy[genomes.index(g)]) for g in run.genomes}
                bench.judge_fronts({"run": [run]}, held_scores.get, reference.higher)
                hvs.append(bench.held_out_hypervolume(run, reference))
            print(f"| searches ranked by {ranking} | {name} | {bench.mean_sd(hvs)} |")


if __name__ == "__main__":
    main()
