"""The `latency` command: a workload's latency table measured in a runtime (latency/)."""

from __future__ import annotations

import argparse

from model_explorer.cli.common import command, load_workload, positive_int
from model_explorer.errors import UserError


def _latency_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument(
        "--runtime",
        help="NAME or NAME:SETTING of a runtime that opens ONNX files (onnxruntime, openvino, "
        "tvm); default: problem.latency.runtime, else onnxruntime",
    )
    parser.add_argument(
        "--threads", type=positive_int, help="the runtime's threads (default: problem.latency's, 1)"
    )
    parser.add_argument(
        "--batch", type=positive_int, help="samples per timed batch (default: problem.latency's, 1)"
    )
    parser.add_argument(
        "--output",
        help="the table's file (default: problem.latency.table, else "
        "results/<workload>_latency_<runtime>.json)",
    )
    parser.add_argument(
        "--remeasure", action="store_true", help="measure even where a matching table exists"
    )


@command(
    "latency",
    _latency_arguments,
    help="per-layer latency of every choice of the search space, measured in a runtime",
    description="Time every layer of the workload's model, exported as `export` writes it, "
    "for every combination of forms its segment's quantizers can take (with what the runtime "
    "fuses it with), and the whole graphs that fit the layer sum's correction; the table "
    "is what the `latency` objective reads.",
)
def latency_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.deployment.runtimes import runtime_setting

    if args.runtime is not None:
        runtime_setting(args.runtime, "--runtime")  # an unknown one said as the option's
    from model_explorer.latency.table import fit_errors, layer_rows
    from model_explorer.operations.latency import latency_table
    from model_explorer.operations.quantization_builder import build_quantization_problem
    from model_explorer.problems.options import BitOptions, LatencySettings
    from model_explorer.workload.context import WorkloadContext

    options = workload.problem.options
    if not isinstance(options, BitOptions):
        raise UserError(
            f"{workload.key('problem.problem_function')}: {workload.problem.problem_function} "
            "has no bit widths or formats to price; latency tables are for quantization problems"
        )
    settings = options.latency or LatencySettings()
    chosen = {
        key: value
        for key, value in (
            ("runtime", args.runtime),
            ("threads", args.threads),
            ("batch", args.batch),
            ("table", args.output),
        )
        if value is not None
    }
    settings = LatencySettings.model_validate({**settings.model_dump(), **chosen})
    context = WorkloadContext(workload)
    problem = build_quantization_problem(context, options, None, latency=False)
    table, path, measured = latency_table(
        context, problem, settings, "--runtime", remeasure=args.remeasure
    )
    machine = table.machine
    print(
        f"{workload.model.type} in {machine['runtime']} {machine['version']}, "
        f"{machine['threads']} thread(s), batch {settings.batch}, {machine['cpu']}"
    )
    heading = f"{'layer':28s} {'forms':>5s} {'int':>4s} {'fastest ms':>11s} {'slowest ms':>11s}"
    print(f"{heading}  fastest: each quantizer's form")
    for row in layer_rows(table):
        print(
            f"{row['layer']:28s} {row['combinations']:>5d} {row['integer']:>4d} "
            f"{row['fastest_ms']:>11.4f} {row['slowest_ms']:>11.4f}  {row['fastest']}"
        )
    errors = fit_errors(table)
    fit = table.fit
    print(
        f"whole graphs: predicted = {fit['intercept_ms']:.4f} ms + {fit['scale']:.3f} x layer "
        f"sum; over the {len(errors)} whole graphs measured, mean |error| "
        f"{sum(errors) / len(errors):.1%}, worst {max(errors):.1%}"
    )
    for where, missing in table.left_out.items():
        print(f"warning: {where}: left out {', '.join(missing)}")
    print(f"{'measured' if measured else 'matching table, reused'}: {path}")
    return 0
