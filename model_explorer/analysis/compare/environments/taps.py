"""Intermediates of a model exported to ONNX, named as the tracer names eager's: the output of
every module that runs operators is marked while the exporter traces (a marker operator, as the
QDQ export marks quantizers), and each mark becomes a graph output named after the last operator
run inside that module (`layer1.0.relu/Relu#0` for a block ending in its ReLU), so that a
runtime's intermediates line up with eager's and localisation can name the first module where
the runtime diverges.

The marks keep the exporter from folding a batch norm into the convolution before it (each
module's output is kept), so the marked file is a second export beside the one the environment
runs: its values are each module's, as eager computes them, in the runtime's arithmetic."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import onnx
import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import operator_outputs

DOMAIN = "model_explorer_taps"


class _Tap(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, index: int) -> Tensor:  # noqa: ANN001
        return x.clone()

    @staticmethod
    def symbolic(g, x, index: int):  # noqa: ANN001, ANN205 - the TorchScript exporter's types
        output = g.op(f"{DOMAIN}::Tap", x, index_i=index)
        output.setType(x.type())
        return output


def last_operators(model: nn.Module, example: Tensor) -> dict[str, str]:
    """Module path -> the tracer's name of the last operator run inside it (by the module
    itself or by one of its children): the operator whose output the module returns."""
    found: dict[str, str] = {}
    for name in operator_outputs(model, example):
        parts = name.rpartition("/")[0].split(".")
        for depth in range(1, len(parts) + 1):
            found[".".join(parts[:depth])] = name
    found.pop("", None)
    return found


def tapped_export(
    model: nn.Module, example: Tensor, path: Path, input_name: str = "input"
) -> list[tuple[str, str]]:
    """Write `model` to `path` with every module's output as a graph output; returns (graph
    output, tracer name) in execution order."""
    names = last_operators(model, example)
    modules = [(path_, module) for path_, module in model.named_modules() if path_ in names]
    hooks = [
        module.register_forward_hook(
            lambda _, __, output, index=index: (
                _Tap.apply(output, index) if isinstance(output, Tensor) else None
            )
        )
        for index, (_, module) in enumerate(modules)
    ]
    buffer = io.BytesIO()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (example,),
                buffer,
                dynamo=False,
                opset_version=17,
                custom_opsets={DOMAIN: 1},
                input_names=[input_name],
                dynamic_axes={input_name: {0: "batch"}},
            )
    finally:
        for hook in hooks:
            hook.remove()
    proto = onnx.load_from_string(buffer.getvalue())
    tapped = []
    outputs = {output.name for output in proto.graph.output}
    for node in proto.graph.node:
        if node.domain != DOMAIN:
            continue
        module = modules[node.attribute[0].i][0]
        node.op_type, node.domain = "Identity", ""
        del node.attribute[:]
        tapped.append((node.output[0], names[module]))
        if node.output[0] not in outputs:
            proto.graph.output.append(onnx.ValueInfoProto(name=node.output[0]))
    for entry in list(proto.opset_import):
        if entry.domain == DOMAIN:
            proto.opset_import.remove(entry)
    onnx.save(proto, str(path))
    return tapped
