"""Exporting a model to ONNX, shared by the ZigZag energy backend, the onnxruntime comparison, the
QDQ export and the runtimes' intermediates.

`mark(x, index)` inside a forward pass becomes one marker node (`model_explorer::Mark` with the
index) in the graph `trace_marked` returns: the way to find in the graph where a tensor of the
PyTorch model went (a quantizer's input, a module's output), whatever the model's code. The
caller turns the markers into what it needs and then `drop_marker_domain`.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import Tensor, nn

INPUT_NAME = "input"
OUTPUT_NAME = "output"
MARKER_DOMAIN = "model_explorer"


class _Marker(torch.autograd.Function):
    """Stands for marker `index` in the traced graph; the values pass through unchanged."""

    @staticmethod
    def forward(ctx, x: Tensor, index: int) -> Tensor:  # noqa: ANN001
        return x.clone()

    @staticmethod
    def symbolic(g, x, index: int):  # noqa: ANN001, ANN205 - the TorchScript exporter's types
        output = g.op(f"{MARKER_DOMAIN}::Mark", x, index_i=index)
        output.setType(x.type())
        return output


def mark(x: Tensor, index: int) -> Tensor:
    """`x` unchanged; in a graph `trace_marked` exports, a marker node with `index`."""
    return _Marker.apply(x, index)


def marker_index(node: Any) -> int | None:
    """The index of a marker node of a traced graph, None for any other node."""
    return node.attribute[0].i if node.domain == MARKER_DOMAIN else None


def _torchscript_export(
    model: nn.Module,
    example: Tensor,
    target: str | BinaryIO,
    opset: int,
    dynamic_batch: bool,
    custom_opsets: dict[str, int] | None = None,
) -> None:
    """torch.onnx.export with the TorchScript exporter, named input and output, eval mode, no
    gradients; its deprecation warnings, and the graph it prints when it fails, kept quiet."""
    axes = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if dynamic_batch else None
    with (
        torch.no_grad(),
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.eval(),
            (example,),
            target,
            dynamo=False,
            opset_version=opset,
            custom_opsets=custom_opsets,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
        )


def export_onnx(
    model: nn.Module, example: torch.Tensor, path: Path, dynamic_batch: bool = False
) -> Path:
    """Write `model` (run on `example`) to `path` as ONNX, opset 13.

    The TorchScript exporter folds batch norms into convolutions in eval mode, as a deployed
    network has them, and names nodes by module path; torch deprecates it in favour of the
    torch.export-based exporter (which needs onnxscript and re-traces the model), hence the
    silenced warnings. With `dynamic_batch` the first axis of input and output is free, so one
    file serves every batch size."""
    _torchscript_export(model, example, str(path), 13, dynamic_batch)
    return path


def trace_marked(model: nn.Module, example: Tensor, opset: int) -> Any:
    """The ONNX graph (an onnx.ModelProto, free batch axis) of `model` run on `example`, with a
    marker node wherever the forward pass called `mark`. Raises what the exporter raises."""
    import onnx

    buffer = io.BytesIO()
    _torchscript_export(model, example, buffer, opset, True, {MARKER_DOMAIN: 1})
    return onnx.load_from_string(buffer.getvalue())


def drop_marker_domain(proto: Any) -> None:
    """Remove the markers' domain from a graph's opset imports, once no marker is left."""
    for entry in list(proto.opset_import):
        if entry.domain == MARKER_DOMAIN:
            proto.opset_import.remove(entry)
