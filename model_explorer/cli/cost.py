"""Commands on what a model costs: cost, energy-analysis, blocks."""

from __future__ import annotations

import argparse
from pathlib import Path

from model_explorer.cli.common import (
    command,
    load_workload,
    positive_int,
    registered_input_shape,
)
from model_explorer.errors import UserError


def _cost_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", nargs="?", help="workload YAML file (or --model)")
    parser.add_argument(
        "--model", help="a model name instead of a workload, e.g. torchvision:resnet18"
    )
    parser.add_argument("--num-classes", type=positive_int, help="with --model")
    parser.add_argument(
        "--input-shape", type=positive_int, nargs="+", metavar="N", help="e.g. 1 3 224 224"
    )
    parser.add_argument(
        "--depth", type=positive_int, help="sum rows per module path cut at this depth"
    )
    parser.add_argument("--sort", help="sort by a column, largest first (e.g. macs, read_mib)")
    parser.add_argument("--top", type=positive_int, help="print only the first N rows")
    parser.add_argument(
        "--leaf-modules",
        action="store_true",
        help="count leaf modules only (the seed's convention)",
    )
    parser.add_argument("--individual", help="bit widths of a result individual: RESULTS#ID")
    parser.add_argument("--csv", help="also write the table as CSV")
    parser.add_argument("--json", help="also write rows, totals and conventions as JSON")
    parser.add_argument("--plot", help="also plot per-layer bars to this PNG/PDF")


@command(
    "cost",
    _cost_arguments,
    help="per-operation cost table: params, MACs, memory, time",
)
def cost_command(args: argparse.Namespace) -> int:
    if args.workload is not None and args.model is None:
        load_workload(args)  # a bad file is refused before torch loads (read again below)
    from model_explorer.cost.analyze import analyze_cost
    from model_explorer.cost.render import (
        conventions_text,
        cost_frame,
        plot_layers,
        totals_text,
    )
    from model_explorer.fileio import atomic_path

    model, shape, label = _cost_model(args)
    if args.input_shape:
        from model_explorer.input_shapes import run_on_shape

        run_on_shape(model, shape, "--input-shape")
    plan = None
    if args.individual:
        from model_explorer.results import load_individual

        result, individual = load_individual(args.individual, "--individual")
        plan = result.plan_of(individual)
        label += f", bit widths of individual {individual.id}"
    report = analyze_cost(model, shape, plan, args.leaf_modules, repeats=5)
    frame = cost_frame(report, args.depth, args.sort, args.top)
    print(f"{label}: cost per {'leaf module' if args.leaf_modules else 'operation'}")
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(totals_text(report))
    if plan is not None:
        from model_explorer.quantization.coverage import plan_coverage

        print(f"quantization coverage: {plan_coverage(report.rows, plan).statement()}")
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
        print(f"wrote {plot_layers(report, args.plot, args.depth, args.top, args.sort)}")
    return 0


def _energy_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument(
        "--backend",
        help="a registered energy backend (`model-explorer list energy`: analytic, zigzag); "
        "default: the workload's",
    )
    parser.add_argument(
        "--output", help="CSV file (default: energy_evaluation.dram_analysis_file, else results/)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing CSV")


@command(
    "energy-analysis",
    _energy_analysis_arguments,
    help="per-layer DRAM accesses and energy to CSV",
)
def energy_analysis_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.operations.energy import (
        analyze_energy,
        default_csv_path,
        write_energy_csv,
    )
    from model_explorer.workload.context import WorkloadContext

    context = WorkloadContext(workload)
    path = Path(args.output) if args.output else default_csv_path(context)
    if path.exists() and not args.force:
        raise UserError(f"--output: '{path}' exists; pass --force to overwrite it")
    rows = analyze_energy(context, args.backend)
    write_energy_csv(rows, path)
    backend = args.backend or (
        workload.energy_evaluation.backend if workload.energy_evaluation else "analytic"
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
    print(f"total DRAM energy: {total / 1e6:.3f} uJ ({len(rows)} layers, words of {word} bits)")
    print(f"wrote {path}")
    return 0


def _blocks_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument(
        "--present", action="store_true", help="count zero blocks already present in the data"
    )
    parser.add_argument("--dataset", default="exploration", help="dataset role for --present")
    parser.add_argument(
        "--input-shape",
        type=positive_int,
        nargs="+",
        metavar="N",
        help="input shape, e.g. 1 3 32 32",
    )
    parser.add_argument("--output", help="also write the table as CSV")


@command(
    "blocks",
    _blocks_arguments,
    help="block counts of the sparsified layers' inputs",
)
def blocks_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.fileio import atomic_path
    from model_explorer.operations.sparsity_report import present_blocks, total_blocks
    from model_explorer.workload.context import WorkloadContext

    context = WorkloadContext(workload)
    if args.present:
        table = present_blocks(context, args.dataset)
        title = f"zero blocks already present per sample ({args.dataset} data, thresholds 0)"
    else:
        table = total_blocks(context, args.input_shape)
        shape = " x ".join(map(str, args.input_shape)) if args.input_shape else "one sample"
        title = f"blocks per sample for input {shape}"
    block = list(workload.sparsity.block_size)
    print(f"{workload.model.type}, block size {block} (width x height): {title}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if args.output:
        with atomic_path(args.output) as temporary:
            table.to_csv(temporary, index=False)
        print(f"wrote {args.output}")
    return 0


def _cost_model(args: argparse.Namespace):  # noqa: ANN202
    """(model, input shape, description) from a workload or from --model."""
    from model_explorer.models.registry import create_model

    if (args.workload is None) == (args.model is None):
        raise UserError("cost: give either a WORKLOAD file or --model NAME")
    if args.model is not None:
        if getattr(args, "set", None):
            raise UserError("--set: changes a WORKLOAD file's settings; --model reads none")
        model = create_model(args.model, args.num_classes, where="--model")
        shape = args.input_shape or registered_input_shape(args.model)
        if shape is None:
            raise UserError(
                f"--input-shape: give the input shape of '{args.model}', e.g. 1 3 224 224"
            )
        return model.eval(), tuple(shape), args.model
    from model_explorer.workload.context import WorkloadContext

    workload = load_workload(args)
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
