"""The `model-explorer` command line: argument parsing for every command; the work is elsewhere.

`python -m model_explorer` and scripts/*.py are the same CLI.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from model_explorer import __version__
from model_explorer.errors import UserError

log = logging.getLogger("model_explorer")

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(
    name: str,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    def decorator(
        function: Callable[[argparse.Namespace], int],
    ) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = function
        return function

    return decorator


def _bits(text: str) -> int:
    value = int(text)
    if not 2 <= value <= 16:
        raise argparse.ArgumentTypeError(f"bit widths are 2 to 16, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _load(args: argparse.Namespace):  # noqa: ANN202
    from model_explorer.workload import Workload

    return Workload.load(args.workload)


def _progress(args: argparse.Namespace) -> bool:
    """Progress bars: forced on by -p, off by --no-progress, else on when stderr is a terminal."""
    if args.progress:
        return True
    return not args.no_progress and sys.stderr.isatty()


def _format_accuracy(value: float | list[float]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:.4f}" for v in value) + "]"
    return f"{value:.4f}"


@command("validate")
def validate_command(args: argparse.Namespace) -> int:
    workload = _load(args)
    sections = [
        name
        for name in ("calibration", "exploration", "retraining", "reevaluation")
        if getattr(workload, name) is not None
    ]
    print(
        f"{args.workload}: valid workload '{workload.name}' (model {workload.model.type}, "
        f"problem {workload.problem.problem_function}, sections: {', '.join(sections) or 'none'})"
    )
    if args.show:
        print(json.dumps(workload.to_dict(), indent=2))
    return 0


@command("evaluate")
def evaluate_command(args: argparse.Namespace) -> int:
    from model_explorer.context import WorkloadContext

    workload = _load(args)
    context = WorkloadContext(workload)
    models = [("float", context.build_model())]
    if args.bits:
        from model_explorer.quantization.pipeline import build_quantized_model

        quantized = build_quantized_model(context)
        for bits in args.bits:
            models.append((f"{bits} bit", quantized))
    results = []
    for role in args.dataset or ["baseline"]:
        info = context.describe(role)
        for label, model in models:
            if label != "float":
                model.bit_widths = [int(label.split()[0])] * len(model.bit_widths)
            accuracy = context.evaluate(model, role)
            results.append(
                {**info, "model": label, "metric": workload.metric.type, "accuracy": accuracy}
            )
            print(
                f"{workload.model.type} ({label}) on {info['where']} ({info['samples']} samples, "
                f"{context.device}): {workload.metric.type} = {_format_accuracy(accuracy)}"
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


@command("calibrate")
def calibrate_command(args: argparse.Namespace) -> int:
    from model_explorer.context import WorkloadContext
    from model_explorer.quantization.pipeline import calibrate_workload

    workload = _load(args)
    context = WorkloadContext(workload)
    model, path, calibrated = calibrate_workload(
        context, force=args.force, if_missing=args.if_missing
    )
    if not calibrated:
        print(f"{path} exists and matches the weights; not calibrating (drop --if-missing to redo)")
        return 0
    spec = workload.calibration
    samples = len(context.loader("calibrate").dataset)
    method = spec.method + (f" {spec.percentile}" if spec.method == "percentile" else "")
    print(
        f"calibrated {len(model.layers)} input quantizers of {workload.model.type} on {samples} "
        f"samples ({method}); wrote {path}"
    )
    return 0


@command("explore")
def explore_command(args: argparse.Namespace) -> int:
    from model_explorer.exploration.explore import ExploreOptions, Interrupted, explore
    from model_explorer.reporting import pareto_table

    workload = _load(args)
    options = ExploreOptions(
        skip_baseline=args.skip_baseline,
        resume=args.resume,
        output=args.output,
        progress=_progress(args),
    )
    try:
        result, path = explore(workload, options)
    except Interrupted as interrupted:
        print(str(interrupted).replace("WORKLOAD", args.workload), file=sys.stderr)
        return 130
    stats = result.stats
    print(
        f"{stats['evaluations']} evaluations ({stats['cache_hits']} cache hits, "
        f"{stats['early_rejected']} rejected early), {len(result.feasible())} feasible"
    )
    if result.baseline is not None:
        baseline = result.baseline[0] if len(result.baseline) == 1 else result.baseline
        print(f"baseline accuracy: {_format_accuracy(baseline)}")
    print("Pareto front:")
    print(pareto_table(result))
    print(f"result: {path}")
    if args.report:
        from model_explorer.reporting import write_report

        written = write_report(result, path.with_name(f"{path.stem}_report"), path)
        print(f"report: {written[-1]}")
    return 0


@command("report")
def report_command(args: argparse.Namespace) -> int:
    from model_explorer.reporting import write_report
    from model_explorer.results import ExplorationResult

    path = Path(args.results)
    result = ExplorationResult.load(path)
    out = Path(args.out) if args.out else path.with_name(f"{path.stem}_report")
    written = write_report(result, out, path)
    print(f"wrote {len(written)} files to {out}/: {', '.join(p.name for p in written)}")
    print(f"report: {written[-1]}")
    return 0


@command("evaluate-individual")
def evaluate_individual_command(args: argparse.Namespace) -> int:
    from model_explorer.exploration.reevaluate import (
        primary_cost,
        reevaluate,
        reevaluation_path,
    )
    from model_explorer.fileio import atomic_path
    from model_explorer.results import ExplorationResult

    workload = _load(args)
    if args.retrained:
        return _evaluate_retrained(workload, args)
    if args.results is None:
        raise UserError("evaluate-individual: give RESULTS, or --retrained CHECKPOINT ...")
    result = ExplorationResult.load(args.results)
    table = reevaluate(workload, result, args.count)
    output = Path(args.output) if args.output else reevaluation_path(Path(args.results))
    with atomic_path(output) as temporary:
        table.to_csv(temporary, index=False)
    print(
        f"re-evaluated the {len(table)} feasible individuals with the lowest "
        f"{primary_cost(result)} on the reevaluation data:"
    )
    columns = ["id", primary_cost(result), "accuracy", "full_accuracy"]
    print(table[[c for c in columns if c in table.columns]].to_string(index=False))
    print(f"wrote {output}")
    return 0


@command("blocks")
def blocks_command(args: argparse.Namespace) -> int:
    from model_explorer.context import WorkloadContext
    from model_explorer.fileio import atomic_path
    from model_explorer.sparsity.report import present_blocks, total_blocks

    workload = _load(args)
    context = WorkloadContext(workload)
    if args.present:
        table = present_blocks(context, args.dataset)
        title = f"zero blocks already present per sample ({args.dataset} data, thresholds 0)"
    else:
        table = total_blocks(context, args.input_shape)
        shape = " x ".join(map(str, args.input_shape)) if args.input_shape else "one sample"
        title = f"blocks per sample for input {shape}"
    block = workload.exploration.extra_args.block_size if workload.exploration else (8, 8)
    print(f"{workload.model.type}, block size {list(block)} (width x height): {title}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if args.output:
        with atomic_path(args.output) as temporary:
            table.to_csv(temporary, index=False)
        print(f"wrote {args.output}")
    return 0


@command("cost")
def cost_command(args: argparse.Namespace) -> int:
    from model_explorer.cost import analyze_cost
    from model_explorer.cost.render import (
        conventions_text,
        cost_frame,
        plot_layers,
        totals_text,
    )
    from model_explorer.fileio import atomic_path

    model, shape, label = _cost_model(args)
    plan = None
    if args.individual:
        from model_explorer.results import load_individual

        result, individual = load_individual(args.individual, "--individual")
        plan = result.plan_of(individual)
        label += f", bit widths of individual {individual.id}"
    report = analyze_cost(model, shape, plan=plan, leaf_modules_only=args.leaf_modules)
    frame = cost_frame(report, args.depth, args.sort, args.top)
    print(f"{label}: cost per {'leaf module' if args.leaf_modules else 'operation'}")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(totals_text(report))
    print("columns:\n" + conventions_text())
    if args.csv:
        with atomic_path(args.csv) as temporary:
            cost_frame(report, args.depth, args.sort).to_csv(temporary, index=False)
        print(f"wrote {args.csv}")
    if args.json:
        from model_explorer.cost.render import write_json

        write_json(report, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        print(f"wrote {plot_layers(report, args.plot, args.depth)}")
    return 0


def _cost_model(args: argparse.Namespace):  # noqa: ANN202
    """(model, input shape, description) from a workload or from --model."""
    from model_explorer.models import MODELS, create_model

    if (args.workload is None) == (args.model is None):
        raise UserError("cost: give either a WORKLOAD file or --model NAME")
    if args.model is not None:
        model = create_model(args.model, args.num_classes, where="--model")
        shape = args.input_shape
        if shape is None:
            if args.model not in MODELS:
                raise UserError(
                    f"--input-shape: give the input shape of '{args.model}', e.g. 1 3 224 224"
                )
            shape = (1, *MODELS.get(args.model).info.input_shape)
        return model.eval(), tuple(shape), args.model
    from model_explorer.context import WorkloadContext

    workload = _load(args)
    context = WorkloadContext(workload)
    model = context.build_model(load_weights=False)
    shape = args.input_shape
    if shape is None:
        if not context.has_dataset("exploration"):
            raise UserError(
                "--input-shape: the workload has no exploration data to take a shape from"
            )
        shape = (1, *next(iter(context.batches("exploration")))[0].shape[1:])
    return model, tuple(shape), workload.model.type


@command("energy-analysis")
def energy_analysis_command(args: argparse.Namespace) -> int:
    from model_explorer.context import WorkloadContext
    from model_explorer.cost.energy.workload import (
        analyze_energy,
        default_csv_path,
        write_energy_csv,
    )

    workload = _load(args)
    context = WorkloadContext(workload)
    path = Path(args.output) if args.output else default_csv_path(context)
    if path.exists() and not args.force:
        raise UserError(f"--output: '{path}' exists; pass --force to overwrite it")
    rows = analyze_energy(context, args.backend)
    write_energy_csv(rows, path)
    backend = args.backend or (
        workload.exploration.energy_evaluation.backend
        if workload.exploration and workload.exploration.energy_evaluation
        else "analytic"
    )
    print(f"{workload.model.type}: DRAM accesses per layer ({backend} backend)")
    columns = ("weights", "inputs", "outputs")
    print(
        f"{'idx':>3}  {'layer':24s} {'type':8s} "
        + " ".join(f"{c:>12s}" for c in columns)
        + "  energy uJ"
    )
    for row in rows:
        weights = row.w_reads + row.w_updates + row.w_fills
        inputs = row.i_reads + row.i_updates + row.i_fills
        outputs = row.o_reads + row.o_updates + row.o_fills
        print(
            f"{row.layer_idx:>3}  {row.layer_name:24s} {row.layer_type:8s} {weights:>12.0f} "
            f"{inputs:>12.0f} {outputs:>12.0f} {row.total_dram_energy / 1e6:>10.3f}"
        )
    total = sum(row.total_dram_energy for row in rows)
    word = rows[0].bitwidth if rows else 0
    print(f"total DRAM energy: {total / 1e9:.6f} mJ ({len(rows)} layers, words of {word} bits)")
    print(f"wrote {path}")
    return 0


def _evaluate_retrained(workload, args: argparse.Namespace) -> int:  # noqa: ANN001
    from model_explorer.context import WorkloadContext
    from model_explorer.retraining import load_retrained

    context = WorkloadContext(workload)
    for path in args.retrained:
        problem, checkpoint = load_retrained(context, path)
        accuracy = context.evaluate(problem.model, "reevaluate")
        print(
            f"{path} (individual {checkpoint['individual']}, retrained): full accuracy "
            f"{_format_accuracy(accuracy)} on the reevaluation data"
        )
    return 0


@command("diagnose")
def diagnose_command(args: argparse.Namespace) -> int:
    from model_explorer.analysis.diagnose import DEFAULT_ORDER
    from model_explorer.analysis.diagnose.run import default_out_dir, diagnose

    workload = _load(args)
    order = [name.strip() for item in args.order or [] for name in item.split(",") if name.strip()]
    out_dir = Path(args.out) if args.out else default_out_dir(workload)
    diagnose(
        workload,
        order or DEFAULT_ORDER,
        out_dir,
        log_path=Path(args.log_path) if args.log_path else None,
        output_workload=Path(args.output_workload) if args.output_workload else None,
        interactive=not args.no_interactive and sys.stdin.isatty(),
        max_batches=args.batches,
    )
    return 0


@command("analyze")
def analyze_command(args: argparse.Namespace) -> int:
    from model_explorer.analysis.hooks import HookRunner
    from model_explorer.analysis.inputs import dataset_samples, file_samples
    from model_explorer.analysis.run import TEMPLATES, load_analysis

    if args.print_template:
        print((TEMPLATES / "template.py").read_text())
        return 0
    if args.analysis is None:
        raise UserError("analyze: name the analysis with --analysis FILE.py (or a shipped one)")
    if (args.model is None) == (args.workload is None):
        raise UserError("analyze: give either --model SPEC or --workload WORKLOAD")
    if args.model is not None:
        from model_explorer.models import create_model, load_checkpoint

        if args.quantized:
            raise UserError("--quantized: needs --workload, whose calibration file it uses")
        model = create_model(args.model, args.num_classes, where="--model").eval()
        if args.weights:
            load_checkpoint(model, args.weights, where="--weights")
        if args.input_data is None:
            raise UserError("--input-data: give the samples to run (.h5, .npz or .npy)")
        samples = file_samples(args.input_data)
    else:
        from model_explorer.context import WorkloadContext

        workload = _load(args)
        context = WorkloadContext(workload)
        if args.quantized:
            from model_explorer.quantization.pipeline import build_quantized_model

            model = build_quantized_model(context)
            if args.bits:
                model.bit_widths = [args.bits] * len(model.bit_widths)
        else:
            model = context.build_model()
        samples = (
            file_samples(args.input_data)
            if args.input_data
            else dataset_samples(context.batches(args.dataset))
        )
    analysis, source = load_analysis(args.analysis, args.analysis_args)
    done = HookRunner(model, analysis, source).run(samples, args.max_samples)
    print(f"ran {done} samples through {type(analysis).__name__} ({source})")
    return 0


@command("retrain")
def retrain_command(args: argparse.Namespace) -> int:
    from model_explorer.context import WorkloadContext
    from model_explorer.retraining import train_baseline
    from model_explorer.schema import resolve_path

    if not args.baseline:
        return retrain_individuals_command(args)
    workload = _load(args)
    if (
        args.if_missing
        and workload.model.weights
        and resolve_path(workload.model.weights).is_file()
    ):
        print(f"{workload.model.weights} exists; not training (drop --if-missing to train anyway)")
        return 0
    context = WorkloadContext(workload)
    result, path = train_baseline(
        context, from_scratch=args.from_scratch, epochs=args.epochs, progress=_progress(args)
    )
    record = result.history[result.best_epoch - 1]
    print(
        f"trained {workload.model.type} for {len(result.history)} epochs on {context.device}; "
        f"best epoch {result.best_epoch}: validation {workload.metric.type} = "
        f"{_format_accuracy(result.best_accuracy)} (loss {record.train_loss:.4f}); saved {path}"
    )
    return 0


def retrain_individuals_command(args: argparse.Namespace) -> int:
    from model_explorer.results import ExplorationResult
    from model_explorer.retraining import retrain_individuals

    if args.results is None or args.output_dir is None:
        raise UserError(
            "retrain: give RESULTS and OUTPUT_DIR to fine-tune individuals of a result, or "
            "--baseline to train the float model"
        )
    workload = _load(args)
    result = ExplorationResult.load(args.results)
    table, description, path = retrain_individuals(
        workload, result, args.output_dir, args.count, args.select, args.epochs, _progress(args)
    )
    print(f"retrained {description}:")
    columns = [
        "id",
        "accuracy",
        "accuracy_before_training",
        "accuracy_after_training",
        "best_epoch",
    ]
    print(table[[c for c in columns if c in table.columns]].to_string(index=False))
    print(f"wrote {path} and {len(table)} checkpoints to {args.output_dir}")
    return 0


@command("compare")
def compare_command(args: argparse.Namespace) -> int:
    from model_explorer.analysis.compare import (
        compare,
        environment,
        table,
        workload_samples,
        write_comparison,
    )
    from model_explorer.context import WorkloadContext

    workload = _load(args)
    context = WorkloadContext(workload, device="cpu")  # the cuda environment moves its own copy
    specs = args.env or ["eager", "eager-fp64", "half", "onnxruntime"]
    environments = [environment(spec, context) for spec in specs]  # every name checked first
    inputs, targets, batch_size = workload_samples(context, args.dataset, args.samples)
    comparison = compare(
        context.build_model(),
        inputs,
        environments,
        targets,
        context,
        batch_size=args.batch_size or batch_size,
        repeats=args.repeats,
        tolerance=args.tolerance,
        localise_disagreements=not args.no_localise,
    )
    out = Path(args.out) if args.out else Path("results") / f"compare_{workload.name}"
    about = {"workload": str(args.workload), "model": workload.model.type}
    about["dataset"] = context.describe(args.dataset)
    written = write_comparison(comparison, out, **about)
    print(table(comparison))
    print(f"wrote {', '.join(p.name for p in written)} to {out}/")
    return 0


@command("list")
def list_command(args: argparse.Namespace) -> int:
    if args.kind == "models":
        from model_explorer.models import MODELS

        names = MODELS.names(args.filter) + ["torchvision:<name>", "package.module:factory"]
    elif args.kind == "datasets":
        from model_explorer.datasets import DATASETS

        names = DATASETS.names(args.filter)
    else:
        from model_explorer.metrics import METRICS

        names = METRICS.names(args.filter)
    print("\n".join(names))
    return 0


class Parser(argparse.ArgumentParser):
    """Reports a usage mistake in one line, like every other user error, with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="model-explorer",
        description="Layer-wise quantization and sparsity exploration of PyTorch models.",
    )
    parser.add_argument("--version", action="version", version=f"model-explorer {__version__}")
    common = Parser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)"
    )
    common.add_argument(
        "-p", "--progress", action="store_true", help="progress bars even when not on a terminal"
    )
    common.add_argument("--no-progress", action="store_true", help="no progress bars")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser(
        "validate", parents=[common], help="check a workload file and print what it holds"
    )
    validate.add_argument("workload", help="workload YAML file")
    validate.add_argument(
        "--show", action="store_true", help="print the workload with all defaults"
    )

    evaluate = commands.add_parser(
        "evaluate", parents=[common], help="accuracy of the workload's float model"
    )
    evaluate.add_argument("workload", help="workload YAML file")
    evaluate.add_argument(
        "--dataset",
        action="append",
        choices=["calibrate", "exploration", "baseline", "train", "validation", "reevaluate"],
        help="dataset role to evaluate on (repeatable; default: baseline)",
    )
    evaluate.add_argument(
        "--bits",
        type=_bits,
        nargs="+",
        metavar="N",
        help="also evaluate the calibrated quantized model with every quantizer at N bits",
    )
    evaluate.add_argument("--json", action="store_true", help="also print the results as JSON")

    calibrate = commands.add_parser(
        "calibrate", parents=[common], help="calibrate the quantizers and write calibration.file"
    )
    calibrate.add_argument("workload", help="workload YAML file")
    calibrate.add_argument("--force", action="store_true", help="overwrite an existing file")
    calibrate.add_argument(
        "--if-missing",
        action="store_true",
        help="keep an existing file made for the current weights",
    )

    explore = commands.add_parser(
        "explore", parents=[common], help="search per-layer settings with NSGA-II"
    )
    explore.add_argument("workload", help="workload YAML file")
    explore.add_argument(
        "-s", "--skip-baseline", action="store_true", help="do not measure the float baseline"
    )
    explore.add_argument(
        "--resume",
        action="store_true",
        help="continue an unfinished result (the --output file, else the newest of this workload)",
    )
    explore.add_argument("--output", help="result file (default: results/expl_..._<time>.pkl)")
    explore.add_argument(
        "--report", action="store_true", help="also write the report (as `model-explorer report`)"
    )

    report = commands.add_parser(
        "report", parents=[common], help="plots and a report.md of a result file"
    )
    report.add_argument("results", help="result file of an exploration")
    report.add_argument("--out", help="folder (default: <results>_report next to the file)")

    individual = commands.add_parser(
        "evaluate-individual",
        parents=[common],
        help="re-evaluate the best individuals of a result on the reevaluation data",
        description="Re-evaluates the N feasible individuals with the lowest primary cost "
        "objective (the first minimised objective, e.g. weighted_bits; ascending, ties broken "
        "by higher accuracy) on reevaluation.datasets.reevaluate, and writes a CSV of their "
        "rows with a full_accuracy column.",
    )
    individual.add_argument("workload", help="workload YAML file")
    individual.add_argument("results", nargs="?", help="result file of an exploration")
    individual.add_argument(
        "--retrained", nargs="+", metavar="CHECKPOINT", help="evaluate checkpoints of `retrain`"
    )
    individual.add_argument("-n", "--count", type=_positive, default=5, help="how many (default 5)")
    individual.add_argument("--output", help="CSV file (default: <results>_reevaluation.csv)")

    blocks = commands.add_parser(
        "blocks", parents=[common], help="block counts of the sparsified layers' inputs"
    )
    blocks.add_argument("workload", help="workload YAML file")
    blocks.add_argument(
        "--present", action="store_true", help="count zero blocks already present in the data"
    )
    blocks.add_argument("--dataset", default="exploration", help="dataset role for --present")
    blocks.add_argument(
        "--input-shape", type=_positive, nargs="+", metavar="N", help="input shape, e.g. 1 3 32 32"
    )
    blocks.add_argument("--output", help="also write the table as CSV")

    cost = commands.add_parser(
        "cost", parents=[common], help="per-operation cost table: params, MACs, memory, time"
    )
    cost.add_argument("workload", nargs="?", help="workload YAML file (or --model)")
    cost.add_argument(
        "--model", help="a model name instead of a workload, e.g. torchvision:resnet18"
    )
    cost.add_argument("--num-classes", type=_positive, help="with --model")
    cost.add_argument(
        "--input-shape", type=_positive, nargs="+", metavar="N", help="e.g. 1 3 224 224"
    )
    cost.add_argument("--depth", type=_positive, help="sum rows per module path cut at this depth")
    cost.add_argument("--sort", help="sort by a column, largest first (e.g. macs, read_mib)")
    cost.add_argument("--top", type=_positive, help="print only the first N rows")
    cost.add_argument(
        "--leaf-modules",
        action="store_true",
        help="count leaf modules only (the seed's convention)",
    )
    cost.add_argument("--individual", help="bit widths of a result individual: RESULTS#ID")
    cost.add_argument("--csv", help="also write the table as CSV")
    cost.add_argument("--json", help="also write rows, totals and conventions as JSON")
    cost.add_argument("--plot", help="also plot per-layer bars to this PNG/PDF")

    energy = commands.add_parser(
        "energy-analysis", parents=[common], help="per-layer DRAM accesses and energy to CSV"
    )
    energy.add_argument("workload", help="workload YAML file")
    energy.add_argument("--backend", choices=["analytic", "zigzag"], help="default: the workload's")
    energy.add_argument(
        "--output", help="CSV file (default: energy_evaluation.dram_analysis_file, else results/)"
    )
    energy.add_argument("--force", action="store_true", help="overwrite an existing CSV")

    analyze = commands.add_parser(
        "analyze", parents=[common], help="run an analysis with hooks before/after every operator"
    )
    analyze.add_argument("--model", help="model name or package.module:factory")
    analyze.add_argument("--num-classes", type=_positive, help="with --model")
    analyze.add_argument("--weights", help="with --model: checkpoint to load")
    analyze.add_argument("--workload", help="workload file (model, weights, data, calibration)")
    analyze.add_argument("--input-data", help="samples: .h5, .npz or .npy (first axis = samples)")
    analyze.add_argument("--dataset", default="exploration", help="with --workload and no file")
    analyze.add_argument(
        "--analysis",
        help="analysis file, or a shipped one: activation_ranges, zero_ratio, histograms",
    )
    analyze.add_argument("--analysis-args", help="string passed to the analysis class")
    analyze.add_argument("--quantized", action="store_true", help="the calibrated QuantizedModel")
    analyze.add_argument("--bits", type=_bits, help="with --quantized: every quantizer at N bits")
    analyze.add_argument("--max-samples", type=_positive, help="stop after N samples")
    analyze.add_argument("--print-template", action="store_true", help="print a template and exit")

    diagnose = commands.add_parser(
        "diagnose",
        parents=[common],
        help="quantization diagnostics: [info]/[warning]/[error] findings and recommendations",
    )
    diagnose.add_argument("workload", help="workload YAML file")
    diagnose.add_argument(
        "--order",
        action="append",
        help="inspectors to run, in order (comma-separated or repeated; registered names or "
        "package.module:Class); default: Norm, Image, BatchNorm, ConcatenatedOutputs, Clipping, "
        "Compression, HighPrecision, Sensitivity",
    )
    diagnose.add_argument("--out", help="folder for images, tables and plots")
    diagnose.add_argument("--log-path", help="log file (default: OUT/diagnostic.log)")
    diagnose.add_argument(
        "--output-workload", help="write a copy of the workload with the recommendations applied"
    )
    diagnose.add_argument(
        "--no-interactive", action="store_true", help="never ask (also when stdin is a terminal)"
    )
    diagnose.add_argument(
        "--batches", type=_positive, default=4, help="calibration batches the inspectors look at"
    )

    retrain = commands.add_parser(
        "retrain",
        parents=[common],
        help="train the float baseline (--baseline) or fine-tune individuals of a result",
    )
    retrain.add_argument("workload", help="workload YAML file")
    retrain.add_argument("results", nargs="?", help="result file whose individuals to fine-tune")
    retrain.add_argument("output_dir", nargs="?", help="folder for checkpoints and retrained.csv")
    retrain.add_argument(
        "--baseline", action="store_true", help="train the float model and save it to model.weights"
    )
    retrain.add_argument("-n", "--count", type=_positive, default=1, help="how many individuals")
    retrain.add_argument(
        "--select",
        default="pareto",
        help="pareto (the front, lowest cost first), best-cost (lowest cost, feasible first) "
        "or ids=<id>,<id>,...",
    )
    retrain.add_argument("--from-scratch", action="store_true", help="ignore existing weights")
    retrain.add_argument("--epochs", type=_positive, help="override retraining.epochs")
    retrain.add_argument(
        "--if-missing", action="store_true", help="do nothing when model.weights already exists"
    )

    compare = commands.add_parser(
        "compare",
        parents=[common],
        help="run the model in several environments, compare outputs, timing, stability",
    )
    compare.add_argument("workload", help="workload YAML file")
    compare.add_argument(
        "--env",
        action="append",
        metavar="ENV",
        help="eager, eager-fp64, half, bfloat16, compile, onnxruntime, cuda, threads=N, "
        "quantized:RESULTS#ID or package.module:factory (repeatable; default: eager, "
        "eager-fp64, half, onnxruntime)",
    )
    compare.add_argument("--samples", type=_positive, default=256, help="first N samples (256)")
    compare.add_argument(
        "--dataset",
        default="exploration",
        choices=["calibrate", "exploration", "baseline", "train", "validation", "reevaluate"],
        help="dataset role whose samples to run (default: exploration)",
    )
    compare.add_argument("--batch-size", type=_positive, help="default: the dataset's")
    compare.add_argument("--repeats", type=_positive, default=5, help="timed passes (5)")
    compare.add_argument(
        "--tolerance", type=float, default=1e-4, help="relative error of an agreeing pair (1e-4)"
    )
    compare.add_argument("--no-localise", action="store_true", help="skip localisation")
    compare.add_argument("--out", help="folder (default: results/compare_<workload name>)")

    listing = commands.add_parser("list", parents=[common], help="list registered names")
    listing.add_argument("kind", choices=["models", "datasets", "metrics"])
    listing.add_argument("filter", nargs="?", help="shell-style pattern, e.g. 'resnet*'")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; user errors print one line on stderr and return 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return COMMANDS[args.command](args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
