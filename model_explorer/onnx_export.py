"""Exporting a model to ONNX, shared by the ZigZag energy backend and the onnxruntime comparison."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

INPUT_NAME = "input"
OUTPUT_NAME = "output"


def export_onnx(
    model: nn.Module, example: torch.Tensor, path: Path, dynamic_batch: bool = False
) -> Path:
    """Write `model` (run on `example`) to `path` as ONNX, opset 13.

    The TorchScript exporter folds batch norms into convolutions in eval mode, as a deployed
    network has them, and names nodes by module path; torch deprecates it in favour of the
    torch.export-based exporter (which needs onnxscript and re-traces the model), hence the
    silenced warnings. With `dynamic_batch` the first axis of input and output is free, so one
    file serves every batch size."""
    model.eval()
    axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        torch.onnx.export(
            model,
            (example,),
            str(path),
            dynamo=False,
            opset_version=13,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
        )
    return path
