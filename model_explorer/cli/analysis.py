"""Commands of the analyses around the search: analyze, diagnose, compare."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model_explorer.cli.common import (
    bit_width,
    command,
    load_workload,
    positive_int,
    registered_input_shape,
)
from model_explorer.errors import UserError
from model_explorer.schema.roles import DATASET_ROLES

log = logging.getLogger(__name__)

# Model files of other frameworks that dalgona's users may pass as --input_model.
MODEL_FILES = {".circle", ".tflite", ".onnx", ".pb", ".h5"}


def _analyze_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        "--input_model",
        dest="model",
        help="model name or package.module:factory (--input_model: dalgona's spelling)",
    )
    parser.add_argument("--num-classes", type=positive_int, help="with --model")
    parser.add_argument("--weights", help="with --model: checkpoint to load")
    parser.add_argument("--workload", help="workload file (model, weights, data, calibration)")
    parser.add_argument(
        "--input-data",
        "--input_data",
        dest="input_data",
        help="samples: .h5 (also dalgona's /value/<i>/<j>, rawData too), .npz or .npy (first "
        "axis = samples); none with --model: one random sample, uniform in [-5, 5), as dalgona",
    )
    parser.add_argument(
        "--input-shape",
        type=positive_int,
        nargs="+",
        metavar="N",
        help="the model input's full shape as PyTorch takes it, e.g. 1 3 224 224: of the random "
        "sample and of rawData records (default: a registered model's, batch 1)",
    )
    parser.add_argument(
        "--input-layout",
        choices=("auto", "nhwc", "nchw"),
        default="auto",
        help="how 4-D inputs of dalgona's /value records lie: nhwc (a Circle model's), nchw "
        "(converted with NCHW inputs kept), auto (told by the first layer's channels, else NHWC)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random sample (0)")
    parser.add_argument("--dataset", default="exploration", help="with --workload and no file")
    parser.add_argument(
        "--analysis",
        help="analysis file, or a shipped one: activation_ranges, zero_ratio, histograms",
    )
    parser.add_argument(
        "--analysis-args",
        "--analysis_args",
        dest="analysis_args",
        help="string passed to the analysis class (with --dalgona: to StartAnalysis)",
    )
    parser.add_argument(
        "--dalgona",
        action="store_true",
        help="dalgona's conventions: the model as a Circle model converted from it, hooks "
        "called positionally, StartAnalysis(args)",
    )
    parser.add_argument("--quantized", action="store_true", help="the calibrated QuantizedModel")
    parser.add_argument(
        "--bits", type=bit_width, help="with --quantized: every quantizer at N bits"
    )
    parser.add_argument("--max-samples", type=positive_int, help="stop after N samples")
    parser.add_argument("--print-template", action="store_true", help="print a template and exit")


def _unused_shape(samples: str) -> UserError:
    return UserError(
        f"--input-shape: shapes the random sample (--model without --input-data) and rawData "
        f"records; {samples} carry their own shapes"
    )


def _layout(model: Any, args: argparse.Namespace, record_shape: Any) -> str:
    """The layout of dalgona's 4-D records by --input-layout (auto: by the first layer)."""
    from model_explorer.analysis.hooks import choose_layout
    from model_explorer.input_shapes import first_layer_channels

    channels = first_layer_channels(model)
    layout, why = choose_layout(record_shape, channels, args.input_layout)
    log.info("--input-data '%s': 4-D inputs read as %s (%s)", args.input_data, layout.upper(), why)
    return layout


def _raw_shape(
    model: Any, args: argparse.Namespace, default_shape: Callable[[], Any]
) -> tuple[int, ...]:
    """The shape rawData records are read in: --input-shape, else the model's default, run
    once through the model."""
    from model_explorer.input_shapes import run_on_shape

    shape = args.input_shape or default_shape()
    if shape is None:
        raise UserError(
            f"--input-shape: '{args.input_data}' holds raw bytes (rawData), which carry no shape, "
            "and none is known for the model (a registered model's, a workload's data); give "
            "it, e.g. --input-shape 1 3 224 224"
        )
    given = "--input-shape" if args.input_shape else "--input-shape (not given: the model's)"
    run_on_shape(model, shape, f"{given} of the rawData records")
    return tuple(shape)


def _file_samples(model: Any, args: argparse.Namespace, default_shape: Callable[[], Any]) -> Any:
    """The samples of --input-data, the first run through the model before any analysis sees
    it (messages give the shapes the model receives and, for dalgona's layout, how its 4-D
    records were read: NHWC or NCHW, as --input-layout chose). `default_shape()`: the input
    shape rawData records are read in without --input-shape (None: unknown)."""
    from model_explorer.analysis.hooks import dalgona_file, file_samples
    from model_explorer.input_shapes import checked_samples

    found = dalgona_file(args.input_data)
    key, shape, layout = f"--input-data '{args.input_data}'", None, "nhwc"
    if found is not None:
        layout = _layout(model, args, found.record_shape)
        if found.raw:
            shape = _raw_shape(model, args, default_shape)
            key += f" (rawData: float32 bytes, {layout.upper()}, of shape {list(shape)})"
        else:
            key += f" (4-D records {layout.upper()}, read as NCHW)"
    if args.input_shape and shape is None:
        raise _unused_shape("the samples of --input-data")
    return checked_samples(model, file_samples(args.input_data, shape, layout), key)


def _random_samples(model: Any, args: argparse.Namespace) -> Any:
    """dalgona's run without input data: one random sample, its shape checked first."""
    from model_explorer.analysis.hooks import random_samples
    from model_explorer.analysis.hooks.inputs import RANDOM_RANGE
    from model_explorer.input_shapes import run_on_shape

    shape = args.input_shape or registered_input_shape(args.model)
    if shape is None:
        raise UserError(
            f"--input-shape: '{args.model}' has no registered input shape for the random sample "
            "run without --input-data; give one, e.g. --input-shape 1 3 224 224 (or the samples "
            "with --input-data)"
        )
    default = f"--input-shape (not given: the registered shape of '{args.model}')"
    given = "--input-shape" if args.input_shape else default
    run_on_shape(model, shape, given)
    low, high = RANDOM_RANGE
    print(
        f"no --input-data: one random sample, uniform in [{low:g}, {high:g}), shape "
        f"{list(shape)}, seed {args.seed}"
    )
    return random_samples(shape, args.seed)


def _model_samples(args: argparse.Namespace) -> tuple[Any, Any]:
    """--model: the model and its samples (--input-data, else one random sample)."""
    from model_explorer.models.checkpoints import load_checkpoint
    from model_explorer.models.registry import create_model

    if Path(args.model).suffix.lower() in MODEL_FILES:
        raise UserError(
            f"--model: '{args.model}' is a model file; analyze runs PyTorch models: name "
            "one with --model NAME or --workload WORKLOAD (--dalgona presents it as the "
            "Circle model converted from it would be)"
        )
    if args.quantized:
        raise UserError("--quantized: needs --workload, whose calibration file it uses")
    model = create_model(args.model, args.num_classes, where="--model").eval()
    if args.weights:
        load_checkpoint(model, args.weights, where="--weights")
    if args.input_data is None:
        return model, _random_samples(model, args)
    return model, _file_samples(model, args, lambda: registered_input_shape(args.model))


def _workload_samples(args: argparse.Namespace) -> tuple[Any, Any]:
    """--workload: its model (--quantized: calibrated) and the samples of --input-data, else
    those of its --dataset."""
    from model_explorer.analysis.hooks import dataset_samples
    from model_explorer.workload.context import WorkloadContext

    workload = load_workload(args)
    context = WorkloadContext(workload)
    if args.quantized:
        from model_explorer.operations.pipeline import build_quantized_model

        model = build_quantized_model(context)
        if args.bits:
            model.bit_widths = [args.bits] * len(model.bit_widths)
    else:
        model = context.build_model()

    def data_shape() -> tuple[int, ...] | None:
        if context.has_dataset(args.dataset):
            return (1, *next(iter(context.batches(args.dataset)))[0].shape[1:])
        return registered_input_shape(workload.model.type)

    if args.input_data:
        return model, _file_samples(model, args, data_shape)
    if args.input_shape:
        raise _unused_shape(f"the workload's --dataset {args.dataset} samples")
    return model, dataset_samples(context.batches(args.dataset))


@command(
    "analyze",
    _analyze_arguments,
    help="run an analysis with hooks before/after every operator",
)
def analyze_command(args: argparse.Namespace) -> int:
    from model_explorer.analysis.hooks import (
        DalgonaRunner,
        HookRunner,
        load_analysis,
        template_text,
    )

    if args.print_template:
        print(template_text())
        return 0
    if args.analysis is None:
        raise UserError("analyze: name the analysis with --analysis FILE.py (or a shipped one)")
    if (args.model is None) == (args.workload is None):
        raise UserError("analyze: give either --model SPEC or --workload WORKLOAD")
    model, samples = _model_samples(args) if args.model is not None else _workload_samples(args)
    analysis, source = load_analysis(args.analysis, args.analysis_args, dalgona=args.dalgona)
    if args.dalgona:
        runner = DalgonaRunner(model, analysis, source, args.analysis_args or "")
    else:
        runner = HookRunner(model, analysis, source)
    done = runner.run(samples, args.max_samples)
    print(f"ran {done} samples through {type(analysis).__name__} ({source})")
    return 0


def _diagnose_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument(
        "--order",
        action="append",
        help="inspectors to run, in order (comma-separated or repeated; registered names or "
        "package.module:Class); default: every shipped inspector by Hailo's priority, highest "
        "first, ties by name: BatchNorm, Norm, Compression, ConcatenatedOutputs, Coverage, "
        "HighPrecision, Activation, Clipping, Image, PostQuantAlgo, PreQuantAlgo, then "
        "Sensitivity (no "
        "priority: it evaluates the model many times)",
    )
    parser.add_argument(
        "--no-debug",
        action="store_true",
        help="write no debug log (.debug.<log name> beside the log: every inspector's DEBUG lines)",
    )
    parser.add_argument("--out", help="folder for images, tables and plots")
    parser.add_argument("--log-path", help="log file (default: OUT/diagnostic.log)")
    parser.add_argument(
        "--output-workload", help="write a copy of the workload with the recommendations applied"
    )
    parser.add_argument(
        "--no-interactive", action="store_true", help="never ask (also when stdin is a terminal)"
    )
    parser.add_argument(
        "--batches", type=positive_int, default=4, help="calibration batches the inspectors look at"
    )


@command(
    "diagnose",
    _diagnose_arguments,
    help="quantization diagnostics: [info]/[warning]/[error] findings and recommendations",
)
def diagnose_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.analysis.diagnose import DEFAULT_ORDER, default_out_dir, diagnose

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
        debug=not args.no_debug,
    )
    return 0


def _compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", help="workload YAML file")
    parser.add_argument(
        "--env",
        action="append",
        metavar="ENV",
        help="eager, eager-fp64, half, bfloat16, compile, cuda, threads=N, a runtime "
        "(onnxruntime, openvino, tvm, litert; NAME:SETTING for another setting), "
        "quantized:RESULTS#ID, deployed[-RUNTIME]:RESULTS#ID or package.module:factory "
        "(repeatable; default: eager, eager-fp64, half, onnxruntime; all: model-explorer "
        "list environments)",
    )
    parser.add_argument("--samples", type=positive_int, default=256, help="first N samples (256)")
    parser.add_argument(
        "--dataset",
        default="exploration",
        choices=list(DATASET_ROLES),
        help="dataset role whose samples to run (default: exploration)",
    )
    parser.add_argument("--batch-size", type=positive_int, help="default: the dataset's")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed passes (5)")
    parser.add_argument(
        "--tolerance", type=float, default=1e-4, help="relative error of an agreeing pair (1e-4)"
    )
    parser.add_argument("--no-localise", action="store_true", help="skip localisation")
    parser.add_argument(
        "--localise-against",
        metavar="ENV",
        help="localise only the pairs with this environment, as DeltaNN compares every "
        "environment with one reference (default: every pair that disagrees)",
    )
    parser.add_argument(
        "--out", "--output", help="folder (default: results/compare_<workload name>)"
    )


@command(
    "compare",
    _compare_arguments,
    help="run the model in several environments, compare outputs, timing, stability",
)
def compare_command(args: argparse.Namespace) -> int:
    workload = load_workload(args)  # a bad file is refused before torch loads
    from model_explorer.analysis.compare import (
        compare,
        environment,
        table,
        workload_samples,
        write_comparison,
    )
    from model_explorer.workload.context import WorkloadContext

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
        localise_against=args.localise_against,
    )
    out = Path(args.out) if args.out else workload.results_folder / f"compare_{workload.name}"
    about = {"workload": str(args.workload), "model": workload.model.type}
    about["dataset"] = context.describe(args.dataset)
    written = write_comparison(comparison, out, **about)
    print(table(comparison))
    print(f"wrote {', '.join(p.name for p in written)} to {out}/")
    if comparison.failures:  # recorded and written for the others; the status says so
        failures = comparison.failures
        print(f"{len(failures)} failed: {'; '.join(failures)}", file=sys.stderr)
        return 1
    return 0
