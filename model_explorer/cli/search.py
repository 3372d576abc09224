"""Commands of the search and its results: explore, report, evaluate-individual."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from model_explorer.cli.common import (
    command,
    format_accuracy,
    load_workload,
    positive_int,
    progress,
)
from model_explorer.errors import UserError


def _explore_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument(
        "-s", "--skip-baseline", action="store_true", help="do not measure the float baseline"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue an unfinished result (the --output file, else the newest of this workload)",
    )
    parser.add_argument("--output", help="result file (default: results/expl_..._<time>.pkl)")
    parser.add_argument(
        "--report", action="store_true", help="also write the report (as `model-explorer report`)"
    )


@command(
    "explore",
    _explore_arguments,
    help="search per-layer settings with NSGA-II",
)
def explore_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a file that does not validate is refused before torch loads
    from model_explorer.operations.explore import ExploreOptions, Interrupted, explore
    from model_explorer.reports.text import (
        cost_summary,
        coverage_summary,
        front_command,
        front_heading,
        front_judged,
        hypervolume_summary,
        pareto_table,
    )

    options = ExploreOptions(
        skip_baseline=args.skip_baseline,
        resume=args.resume,
        output=args.output,
        progress=progress(args),
    )
    try:
        result, path = explore(workload, options)
    except Interrupted as interrupted:
        print(interrupted, file=sys.stderr)
        return 130
    stats = result.stats
    print(
        f"{stats['evaluations']} evaluations ({stats['cache_hits']} cache hits, "
        f"{stats['early_rejected']} rejected early, "
        f"{stats.get('rejected_dominated', 0)} stopped at the front), "
        f"{len(result.feasible())} feasible"
    )
    print(f"cost: {cost_summary(result)}")
    if result.problem.get("coverage") is not None:
        print(f"quantization coverage: {coverage_summary(result)}")
    if result.feasible():
        print(f"hypervolume: {hypervolume_summary(result)}")
    if result.baseline is not None:
        baseline = result.baseline[0] if len(result.baseline) == 1 else result.baseline
        print(f"baseline {result.problem.get('metric', 'accuracy')}: {format_accuracy(baseline)}")
    print(f"{front_heading(result)}:")
    print(pareto_table(result))
    for line in front_judged(result, front_command(args.workload, path)):
        print(line)
    print(f"result: {path}")
    if args.report:
        from model_explorer.reports.text import write_report

        written = write_report(result, path.with_name(f"{path.stem}_report"), path)
        print(f"report: {written[-1]}")
    return 0


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", help="result file of an exploration")
    parser.add_argument("--out", help="folder (default: <results>_report next to the file)")


@command(
    "report",
    _report_arguments,
    help="plots and a report.md of a result file",
)
def report_command(args: argparse.Namespace) -> int:
    from model_explorer.reports.text import write_report
    from model_explorer.results import ExplorationResult

    path = Path(args.results)
    result = ExplorationResult.load(path)
    out = Path(args.out) if args.out else path.with_name(f"{path.stem}_report")
    written = write_report(result, out, path)
    print(f"wrote {len(written)} files to {out}/: {', '.join(p.name for p in written)}")
    print(f"report: {written[-1]}")
    return 0


def _evaluate_individual_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument("results", nargs="?", help="result file of an exploration")
    parser.add_argument(
        "--retrained",
        nargs="+",
        action="extend",
        metavar="CHECKPOINT",
        help="evaluate checkpoints of `retrain`",
    )
    parser.add_argument("-n", "--count", type=positive_int, default=5, help="how many (default 5)")
    parser.add_argument(
        "--output",
        help="CSV file (default: <results>_reevaluation.csv; with --backend "
        "<results>_deployment.csv)",
    )
    parser.add_argument(
        "--backend",
        action="append",
        metavar="RUNTIME",
        help="export each individual as a QDQ ONNX file and score it with this runtime "
        "(onnxruntime, openvino, tvm at their default settings, RUNTIME:SETTING beside the "
        "default; repeatable) on the exploration data, beside the accuracy the result recorded "
        "and the fake-quantized model's; exit status 1 where a check fails (see export --check)",
    )
    parser.add_argument(
        "--front", action="store_true", help="every member of the Pareto front instead of -n"
    )


@command(
    "evaluate-individual",
    _evaluate_individual_arguments,
    help="re-evaluate the best individuals of a result on the reevaluation data",
    description="Re-evaluates the N feasible individuals with the lowest primary cost "
    "objective (the first minimised objective, e.g. weighted_bits; ascending, ties broken by "
    "higher accuracy), or with --front the feasible members of the Pareto front, on "
    "reevaluation.datasets.reevaluate, and writes a CSV of their rows with a "
    "reevaluation_accuracy column.",
)
def evaluate_individual_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.fileio import atomic_path
    from model_explorer.operations.reevaluate import (
        primary_cost,
        reevaluate,
        reevaluation_path,
    )
    from model_explorer.results import ExplorationResult

    if args.retrained:
        return _evaluate_retrained(workload, args)
    if args.results is None:
        raise UserError("evaluate-individual: give RESULTS, or --retrained CHECKPOINT ...")
    result = ExplorationResult.load(args.results)
    if args.backend:
        from model_explorer.cli.deployment import evaluate_deployed

        return evaluate_deployed(workload, result, args)
    from model_explorer.workload.context import WorkloadContext

    context = WorkloadContext(workload)
    table = reevaluate(workload, result, args.count, context, front=args.front)
    output = Path(args.output) if args.output else reevaluation_path(Path(args.results))
    with atomic_path(output) as temporary:
        table.to_csv(temporary, index=False)
    chosen = "feasible front members" if args.front else "feasible individuals with the lowest"
    print(
        f"re-evaluated the {len(table)} {chosen}"
        f"{'' if args.front else ' ' + primary_cost(result)} on the reevaluation data:"
    )
    columns = ["id", primary_cost(result), "accuracy", "reevaluation_accuracy"]
    print(table[[c for c in columns if c in table.columns]].to_string(index=False))
    # The float model on the same data: what the reevaluation accuracies compare with.
    float_accuracy = context.evaluate(context.build_model(), "reevaluate")
    searched = result.baseline[0] if result.baseline else None
    print(
        f"the float model: {format_accuracy(float_accuracy)} on the reevaluation data"
        + (f" ({searched:.4f} on the exploration data)" if searched is not None else "")
    )
    print(f"wrote {output}")
    return 0


def _evaluate_retrained(workload, args: argparse.Namespace) -> int:  # noqa: ANN001
    from model_explorer.operations.retraining import load_retrained
    from model_explorer.workload.context import WorkloadContext

    context = WorkloadContext(workload)
    for path in args.retrained:
        problem, checkpoint = load_retrained(context, path)
        accuracy = context.evaluate(problem.model, "reevaluate")
        print(
            f"{path} (individual {checkpoint['individual']}, retrained): full accuracy "
            f"{format_accuracy(accuracy)} on the reevaluation data"
        )
    return 0
