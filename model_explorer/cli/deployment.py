"""Commands that take a result to runtimes: export (an individual as a QDQ ONNX file), and the
runtime backends of evaluate-individual."""

from __future__ import annotations

import argparse
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from model_explorer.cli.common import command
from model_explorer.errors import UserError


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("individual", metavar="RESULTS#ID", help="a result file and an id")
    parser.add_argument("--onnx", required=True, metavar="FILE", help="the ONNX file to write")
    parser.add_argument(
        "--workload",
        help="workload YAML file (default: the workload stored in the result; relative paths "
        "in it are read from the current directory)",
    )
    parser.add_argument(
        "--int8-weights",
        action="store_true",
        help="store weights of up to 4 bits as INT8, not INT4 (more runtimes run INT8 on "
        "integer kernels; the file is larger)",
    )
    parser.add_argument(
        "--check",
        action="append",
        metavar="RUNTIME",
        help="run the file with this runtime (onnxruntime, openvino, tvm) at its default "
        "settings on the exploration data, beside the fake-quantized model; RUNTIME:SETTING "
        "(onnxruntime:basic, openvino:f32, tvm:O3; model-explorer list runtime) runs that "
        "setting beside the default; repeatable. The check fails (exit status 1) where a "
        "runtime scores more than half a point from the recorded accuracy, or a setting from "
        "its default, and writes what it ran into the file's metadata; prints each layer's "
        "precision as asked and as each runtime ran it, with a warning per 8-bit layer run in "
        "float (kept in <results>_deployment_audit.json for report.md)",
    )


@command(
    "export",
    _export_arguments,
    help="write an individual of a result as a quantized ONNX file (QDQ, opset 21)",
    description="Writes the individual's model, its plan in effect and calibrated as the search "
    "scored it, as an ONNX graph in QDQ form: weights stored as integers (INT4 up to 4 bits, "
    "INT8, INT16) or FP8 with their scales, activations through QuantizeLinear/DequantizeLinear "
    "(fewer levels than the type: a Clip of the integers), batch norms folded into the weight "
    "scales. Runtimes run 8-bit layers on integer kernels.",
)
def export_command(args: argparse.Namespace) -> int:
    from model_explorer.deployment.runtimes import file_runtimes
    from model_explorer.operations.deployment_check import check_individual, export_individual
    from model_explorer.results import load_individual
    from model_explorer.workload.context import WorkloadContext

    file_runtimes(args.check or [], "--check")
    result, individual = load_individual(args.individual, "RESULTS#ID")
    context = WorkloadContext(_workload(args.workload, result, args.set or ()))
    pack = not args.int8_weights
    if args.check:
        check = check_individual(context, result, individual, args.check, args.onnx, pack)
        summary = check.export
    else:
        _, summary = export_individual(context, result, individual, args.onnx, pack)
    formats = ", ".join(f"{name} x{count}" for name, count in sorted(summary.formats.items()))
    print(
        f"wrote {summary.path} ({Path(summary.path).stat().st_size:,} bytes): "
        f"{summary.quantizers} quantizers "
        f"({formats}), {summary.folded_batch_norms} batch norms folded, "
        f"{summary.quantized_outputs} outputs quantized for integer kernels"
    )
    if summary.coverage is not None:
        print(f"quantization coverage: {summary.coverage.statement()}")
    if args.check:
        print_checks([check])
        _record_audits(args.individual.rpartition("#")[0], [check])
        return 0 if check.passed else 1
    return 0


def _workload(path: str | None, result: Any, overrides: Any = ()) -> Any:
    from model_explorer.operations.reevaluate import check_same_model
    from model_explorer.workload.file import Workload

    if path is None:
        where = "the result's stored workload"
        return Workload.from_dict(result.workload, source=where, overrides=overrides)
    workload = Workload.load(path, overrides=overrides)
    check_same_model(workload, result)
    return workload


def print_checks(checks: list[Any]) -> None:
    """The checks as a table: recorded, fake-quantized and each runtime's accuracy, agreement
    and which layers ran on integers; then each check's audit, the precision each layer was
    asked and each runtime ran, with a warning per layer that silently ran in float."""
    from model_explorer.deployment.audit_render import audit_table, notes, warning_lines

    for check in checks:
        recorded = "-" if check.recorded is None else f"{check.recorded:.4f}"
        if check.bound:  # the search stopped scoring it early: the most it could reach
            recorded = f"at most {recorded} (scored in part: the search stopped it early)"
        print(
            f"individual {check.individual}: recorded {recorded}, fake-quantized "
            f"{check.fake_quant:.4f} on the exploration data"
        )
        for score in check.runtimes:
            integer = ", ".join(score.integer_layers) or "none"
            other = ", ".join(score.float_layers) or "none"
            print(
                f"  {score.runtime} ({score.settings}): {score.accuracy:.4f}, same class as the "
                f"fake-quantized model on {score.agreement:.2%} of the samples; integer "
                f"kernels: {integer}; float: {other}"
            )
        for failure in check.failures:
            print(f"  CHECK FAILED: {failure}")
        if check.audit is not None:
            print(f"individual {check.individual}: precision per layer, asked and executed")
            print(textwrap.indent(audit_table(check.audit), "  "))
            for line in warning_lines(check.audit) + notes(check.audit):
                print(f"  {line}")


def _record_audits(results: str, checks: list[Any]) -> None:
    """The checks' audits kept beside the result file, where report.md reads them."""
    from model_explorer.deployment.audit_render import record_audits

    audits = {check.individual: check.audit for check in checks if check.audit is not None}
    if audits:
        print(f"wrote {record_audits(results, audits)}")


def evaluate_deployed(workload: Any, result: Any, args: argparse.Namespace) -> int:
    """evaluate-individual --backend: each chosen individual exported and run by the runtimes,
    one row per individual in a CSV file; their audits kept beside the result file."""
    import pandas as pd

    from model_explorer.deployment.runtimes import file_runtimes
    from model_explorer.fileio import atomic_path
    from model_explorer.operations.deployment_check import check_individual
    from model_explorer.operations.reevaluate import best_feasible, check_same_model
    from model_explorer.workload.context import WorkloadContext

    file_runtimes(args.backend, "--backend")
    check_same_model(workload, result)
    context = WorkloadContext(workload)
    chosen = result.pareto_front() if args.front else best_feasible(result, args.count)
    if not chosen:
        raise UserError(f"{args.results}: the result has no individual to evaluate")
    checks = []
    with tempfile.TemporaryDirectory(prefix="model_explorer_deploy_") as folder:
        for individual in chosen:
            path = Path(folder) / f"individual_{individual.id}.onnx"
            checks.append(check_individual(context, result, individual, args.backend, path))
    output = Path(args.output) if args.output else Path(args.results).with_suffix("")
    if not args.output:
        output = output.with_name(output.name + "_deployment.csv")
    with atomic_path(output) as temporary:
        pd.DataFrame([check.row() for check in checks]).to_csv(temporary, index=False)
    print_checks(checks)
    print(f"wrote {output}")
    _record_audits(args.results, checks)
    return 0 if all(check.passed for check in checks) else 1
