"""Commands on a workload file and its float or calibrated model: validate, evaluate, calibrate."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from model_explorer.cli.common import (
    bit_width,
    command,
    format_accuracy,
    load_workload,
)
from model_explorer.schema.roles import DATASET_ROLES


def _validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument("--show", action="store_true", help="print the workload with all defaults")


@command(
    "validate",
    _validate_arguments,
    help="check a workload file and print what it holds",
)
def validate_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)
    energy = workload.energy_evaluation
    if energy is not None and energy.input_shape is not None:
        from model_explorer.workload.context import WorkloadContext

        key = workload.key("energy_evaluation.input_shape")
        WorkloadContext(workload).check_input_shape(energy.input_shape, key)
    optional = ("calibration", "energy_evaluation", "exploration", "retraining", "reevaluation")
    sections = [name for name in optional if getattr(workload, name) is not None]
    print(
        f"{args.workload}: valid workload '{workload.name}' (model {workload.model.type}, "
        f"problem {workload.problem.problem_function}, sections: {', '.join(sections) or 'none'})"
    )
    if args.show:
        print(json.dumps(workload.to_dict(defaults=True), indent=2))
    return 0


def _evaluate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument(
        "--dataset",
        action="append",
        choices=list(DATASET_ROLES),
        help="dataset role to evaluate on (repeatable; default: baseline)",
    )
    parser.add_argument(
        "--bits",
        type=bit_width,
        nargs="+",
        action="extend",
        metavar="N",
        help="also evaluate the calibrated quantized model with every quantizer at N bits",
    )
    parser.add_argument(
        "--plan",
        action="append",
        metavar="FILE",
        help="also evaluate the calibrated quantized model with a plan from outside: JSON or "
        "YAML, quantizer names to bits or formats ({'conv1.input_quantizer': 4}) or layer "
        "names to settings; quantizers it does not name keep the workload's (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")


@command(
    "evaluate",
    _evaluate_arguments,
    help="accuracy of the workload's float model",
)
def evaluate_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.workload.context import WorkloadContext

    context = WorkloadContext(workload)
    models: list = [("float", context.build_model())]
    if args.bits or args.plan:
        from model_explorer.operations.pipeline import build_quantized_model
        from model_explorer.quantization.plan_file import apply_plan_file

        for bits in args.bits or []:
            models.append((f"{bits} bit", build_quantized_model(context)))
        for path in args.plan or []:
            quantized = build_quantized_model(context)
            apply_plan_file(quantized, path)  # checked before anything is evaluated
            models.append((f"plan {Path(path).name}", quantized))
    results = []
    for role in args.dataset or ["baseline"]:
        info = context.describe(role)
        for label, model in models:
            if label.endswith(" bit"):
                model.bit_widths = [int(label.split()[0])] * len(model.bit_widths)
            accuracy = context.evaluate(model, role)
            results.append(
                {**info, "model": label, "metric": workload.metric.type, "accuracy": accuracy}
            )
            print(
                f"{workload.model.type} ({label}) on {_data_named(info)} "
                f"({info['samples']} samples, {context.device}): "
                f"{workload.metric.type} = {format_accuracy(accuracy)}"
                + _nonfinite_note(model, context.batches(role), label, info)
            )
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


def _data_named(info: dict) -> str:
    """The data set evaluated, named by its role where it stands in for it (the baseline
    role takes the exploration data when the workload gives it none)."""
    role, where = info["role"], info["where"]
    return where if where.endswith(f".{role}") else f"{role} data from {where}"


def _nonfinite_note(model, batches, label: str, info: dict) -> str:  # noqa: ANN001
    """Say so, on stderr and beside the accuracy, when outputs hold NaN or infinity."""
    from model_explorer.datasets.checks import nonfinite_samples

    bad = nonfinite_samples(model, batches)
    if not bad:
        return ""
    total = info["samples"]
    share = "every output is" if bad == total else f"the outputs of {bad} of {total} samples are"
    print(
        f"warning: {label} model on {info['where']}: {share} NaN or infinite; the accuracy "
        "counts them as wrong",
        file=sys.stderr,
    )
    return f" ({bad} of {total} outputs NaN or infinite)"


def _calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.add_argument(
        "--if-missing",
        action="store_true",
        help="keep an existing file made for the current weights",
    )


@command(
    "calibrate",
    _calibrate_arguments,
    help="calibrate the quantizers and write calibration.file",
)
def calibrate_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.operations.pipeline import calibrate_workload, report_coverage
    from model_explorer.quantization.spec import CALIBRATORS
    from model_explorer.workload.context import WorkloadContext

    context = WorkloadContext(workload)
    model, path, calibrated = calibrate_workload(
        context, force=args.force, if_missing=args.if_missing
    )
    coverage = report_coverage(context, model)
    if not calibrated:
        print(
            f"{path} exists and matches the weights and the calibration settings; not "
            f"calibrating (drop --if-missing to redo); {coverage.statement()}"
        )
        return 0
    spec = workload.calibration
    samples = len(context.loader("calibrate").dataset)
    method = CALIBRATORS.get(spec.method).builder.summary(spec.options)
    print(
        f"calibrated {len(model.layers)} input quantizers of {workload.model.type} on {samples} "
        f"samples ({method}); wrote {path}; {coverage.statement()}"
    )
    return 0
