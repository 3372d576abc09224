"""DeltaNN's study on a published ImageNet network, offline: EfficientNet-Lite0 with its
ImageNet weights on the photographs' crops, run in every environment this machine has (eager
float32/float64/float16/bfloat16, one thread, torch.compile, onnxruntime, OpenVINO, TVM at its
optimisation levels, LiteRT where installed) and in two individuals of a search on it, as
fake-quantized models and as QDQ files in onnxruntime and OpenVINO; then DeltaNN's matrices (the
lower triangle of top-1 dissimilarity and of the change in time) and, for each environment
against eager float32, where localisation finds it diverging.

    python benchmarks/bench_deltann.py [WORKLOAD] [--results RESULTS.pkl] [--samples 128]
        [--repeats 2] [--out results/deltann_study] [--env ENV ...]

Without --results a short search (3 generations of 8 on 64 crops) gives the individuals: the
front's most and least accurate members. Writes everything `compare` writes to --out, prints
compare's table, then the tables docs/compare.md quotes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from prepared import prepared_context

from model_explorer.analysis.compare import compare, table, workload_samples, write_comparison
from model_explorer.operations.explore import ExploreOptions, explore
from model_explorer.results import ExplorationResult

FLOAT_ENVIRONMENTS = [
    "eager",
    "eager-fp64",
    "half",
    "bfloat16",
    "threads=1",
    "compile",
    "onnxruntime",
    "openvino",
    "tvm:0",
    "tvm",
    "tvm:default",
    "litert",
]
SEARCH = [
    "exploration.nsga.pop_size=8",
    "exploration.nsga.offsprings=8",
    "exploration.nsga.generations=3",
    "exploration.datasets.exploration.sample_limit=64",
]


def individuals(workload: str, results: str | None, out: Path) -> tuple[str, list[int]]:
    """The result file and the ids of its front's most and least accurate members (the front
    orders accuracy against bits: the most bits is the most accurate)."""
    if results is None:
        searched, context = prepared_context(workload, SEARCH)
        results = str(out / "search.pkl")
        started = time.perf_counter()
        resume = Path(results).exists()  # an earlier run's search, finished where it stopped
        options = ExploreOptions(output=results, progress=False, resume=resume)
        explore(searched, options, context=context)
        print(f"search: {time.perf_counter() - started:.0f} s -> {results}")
    front = ExplorationResult.load(results).pareto_front()
    by_bits = sorted(front, key=lambda member: member.values["weighted_bits"])
    chosen = [by_bits[-1], by_bits[0]] if len(by_bits) > 1 else by_bits
    for member in chosen:
        print(
            f"individual #{member.id}: {member.values['weighted_bits']:.1f} weighted bits, "
            f"metric {member.values['accuracy']:.4f} on the search's crops"
        )
    return results, [member.id for member in chosen]


def localisation_summary(found: dict) -> str:
    """The first operator above the tolerance and the three with the largest relative error."""
    if found.get("failed"):
        return f"failed: {found['failed']}"
    operators = found["operators"]
    if not operators:
        return found.get("note", "")
    first = found["first"]["name"] if found["first"] else "none above the tolerance"
    worst = sorted(operators, key=lambda row: -row["relative_error"])[:3]
    largest = ", ".join(f"`{row['name']}` {row['relative_error']:.2g}" for row in worst)
    final = operators[-1]["relative_error"]
    return f"first `{first}`; largest {largest}; at the output {final:.2g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", nargs="?", default="workloads/efficientnet_lite0_photos.yaml")
    parser.add_argument("--results", help="a search's result file (default: a short search)")
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="results/deltann_study")
    parser.add_argument(
        "--env",
        action="append",
        help="only these environments, against eager (e.g. --env litert in .venv-litert, "
        "which cannot hold TVM beside it); default: every one above and the individuals",
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.env:
        environments = ["eager", *[env for env in args.env if env != "eager"]]
    else:
        results, ids = individuals(args.workload, args.results, out)
        quantized = [f"quantized:{results}#{i}" for i in ids]
        deployed = [f"deployed-{rt}:{results}#{ids[0]}" for rt in ("onnxruntime", "openvino")]
        environments = FLOAT_ENVIRONMENTS + quantized + deployed
    workload, context = prepared_context(args.workload)
    inputs, targets, batch_size = workload_samples(context, "exploration", args.samples)
    started = time.perf_counter()
    comparison = compare(
        context.build_model(),
        inputs,
        environments,
        targets,
        context,
        batch_size=batch_size,
        repeats=args.repeats,
        localise_against="eager",
    )
    print(f"compare: {time.perf_counter() - started:.0f} s on {len(inputs)} crops")
    write_comparison(comparison, out, workload=args.workload, model=workload.model.type)
    print(table(comparison))

    runs, eager = comparison.runs, comparison.runs["eager"].median_seconds_per_sample
    pairs = {(p["a"], p["b"]): p for p in comparison.pairs}
    print(
        "\n| environment | ms per sample | time vs eager | top-1 dissimilarity | top-5 Jaccard "
        "| Kendall's tau | max rel | where it diverges |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, run in runs.items():
        ms = run.median_seconds_per_sample * 1e3
        if name == "eager":
            print(f"| {name} | {ms:.1f} | | | | | | |")
            continue
        pair = pairs.get(("eager", name)) or pairs[(name, "eager")]
        found = comparison.localisations.get(("eager", name))
        where = localisation_summary(found) if found else "agrees"
        print(
            f"| {name} | {ms:.1f} | {run.median_seconds_per_sample / eager:.2f}x "
            f"| {pair['top1_dissimilarity']:.1%} | {pair['topk_jaccard']:.3f} "
            f"| {pair['kendall_tau']:.3f} | {pair['max_rel_error']:.2g} | {where} |"
        )
    for name, reason in comparison.skipped.items():
        print(f"| {name} | skipped: {reason} |")

    names = list(runs)
    print("\nTop-1 dissimilarity, % (row against column):\n")
    print("| | " + " | ".join(names[:-1]) + " |")
    print("|---" * len(names) + "|")
    for i, row in enumerate(names[1:], 1):
        cells = []
        for column in names[:i]:
            pair = pairs.get((column, row)) or pairs[(row, column)]
            cells.append(f"{100 * pair['top1_dissimilarity']:.1f}")
        print(f"| {row} | " + " | ".join(cells) + " |" * (len(names) - i))
    stable = [name for name, run in runs.items() if not run.bitwise_stable]
    print(f"\nnot bitwise stable over the repeats: {', '.join(stable) or 'none'}")
    print(f"float top-1 classes on these crops: {len(np.unique(runs['eager'].logits.argmax(1)))}")


if __name__ == "__main__":
    main()
