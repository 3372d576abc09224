"""`model-explorer debug RESULTS#ID`: an individual's error layer by layer, in PyTorch and in
the runtimes, and with `--target`/`--drop` its cheapest repair, appended to the result."""

from __future__ import annotations

import argparse
from pathlib import Path

from model_explorer.cli.common import command
from model_explorer.errors import UserError


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("individual", metavar="RESULTS#ID", help="a result file and an id")
    parser.add_argument(
        "--workload",
        help="workload YAML file (default: the workload stored in the result)",
    )
    parser.add_argument(
        "--runtime",
        action="append",
        metavar="RUNTIME",
        help="measure the exported file's SQNRs in this runtime too (onnxruntime, openvino, "
        "RUNTIME:SETTING; repeatable; default onnxruntime)",
    )
    parser.add_argument(
        "--no-runtime", action="store_true", help="only the fake-quantized model's columns"
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=256,
        help="exploration samples the SQNRs are measured on (default 256; accuracies always "
        "use all of the exploration data)",
    )
    parser.add_argument(
        "--output",
        metavar="PREFIX",
        help="where the table and the figure go: PREFIX.csv, PREFIX.png (default: "
        "<results>_debug_<id> beside the result)",
    )
    goal = parser.add_mutually_exclusive_group()
    goal.add_argument(
        "--target",
        type=float,
        metavar="ACCURACY",
        help="repair: raise the fewest, cheapest quantizers (to wider choices the search "
        "allows) until the individual reaches this accuracy on the exploration data, and "
        "append the repaired individual to the result",
    )
    goal.add_argument(
        "--drop", type=float, metavar="D", help="repair to the float accuracy less D (0.01)"
    )


@command(
    "debug",
    _arguments,
    help="why an individual lost accuracy, layer by layer, and its cheapest repair",
    description="Per layer, in network order: the local and accumulated SQNR at its quantized "
    "input (onnxruntime's qdq_loss_debug definitions), at its output and at the network "
    "output with it alone quantized (Hailo's two), the weight-only and activation-only "
    "SQNR, the same in each runtime on the exported file, and the individual's accuracy "
    "with that layer restored to float. Writes a CSV table and a figure and names the five "
    "layers that explain most of the drop. --target/--drop finds the cheapest set of "
    "quantizers to raise by measurement (a bisection, then a greedy give-back) and appends "
    "the repaired individual to the result.",
)
def debug_command(args: argparse.Namespace) -> int:
    from model_explorer.analysis.debug import api, render
    from model_explorer.deployment.runtimes import file_runtimes

    if args.samples < 1:
        raise UserError(f"--samples: must be a positive number of samples, got {args.samples}")
    runtimes = [] if args.no_runtime else (args.runtime or ["onnxruntime"])
    file_runtimes(runtimes, "--runtime")  # before anything runs or is written over
    report = api.debug(args.individual, args.workload, runtimes, args.samples)
    path = Path(args.individual.rpartition("#")[0])
    prefix = (
        Path(args.output)
        if args.output
        else path.with_name(f"{path.stem}_debug_{report.individual}")
    )
    prefix.parent.mkdir(parents=True, exist_ok=True)
    earlier = prefix.with_suffix(".csv").exists()  # a rerun's table replaces the last one's
    table = render.write_csv(report, prefix.with_suffix(".csv"))
    figure = render.plot(report, prefix.with_suffix(".png"))
    print(render.text(report))
    said = "replaced the earlier" if earlier else "wrote"
    print(f"{said} {table} and {figure}" + (" (--output PREFIX keeps both)" if earlier else ""))
    if args.target is not None or args.drop is not None:
        repaired = api.repair(args.individual, args.target, args.drop, args.workload)
        print(render.repair_text(repaired, report))
    return 0
