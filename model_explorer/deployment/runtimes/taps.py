"""Intermediates of a model exported to ONNX, named as the tracer names eager's: the output of
every module that runs operators is marked while the exporter traces (a marker operator, as the
QDQ export marks quantizers), and each mark becomes a graph output named after the last operator
run inside that module (`layer1.0.relu/Relu#0` for a block ending in its ReLU), so that a
runtime's intermediates line up with eager's and localisation can name the first module where
the runtime diverges.

The marks keep the exporter from folding a batch norm into the convolution before it (each
module's output is kept), so the marked file is a second export beside the one the environment
runs: its values are each module's, as eager computes them, in the runtime's arithmetic.

Runtimes that read PyTorch (LiteRT) or that cannot read the marked file (TVM's ONNX frontend
refuses a Pad computed from the input's shape, as TensorFlow-style "same" padding exports)
take `tapped_module` instead: the model returning every module's output beside its own, for
torch.export."""

from __future__ import annotations

from pathlib import Path

import onnx
import torch
from torch import Tensor, nn

from model_explorer.tracing import operator_outputs
from model_explorer.tracing.onnx_export import drop_marker_domain, mark, marker_index, trace_marked


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


def tap_points(model: nn.Module, example: Tensor) -> list[tuple[str, nn.Module]]:
    """(tracer name of its output, module) of every module that runs operators, in definition
    order: where a runtime's intermediates are taken."""
    names = last_operators(model, example)
    return [(names[path], module) for path, module in model.named_modules() if path in names]


def tapped_export(model: nn.Module, example: Tensor, path: Path) -> list[tuple[str, str]]:
    """Write `model` to `path` with every module's output as a graph output; returns (graph
    output, tracer name) in execution order."""
    modules = tap_points(model, example)
    hooks = [
        module.register_forward_hook(
            lambda _, __, output, index=index: (
                mark(output, index) if isinstance(output, Tensor) else None
            )
        )
        for index, (_, module) in enumerate(modules)
    ]
    try:
        proto = trace_marked(model, example, 17)
    finally:
        for hook in hooks:
            hook.remove()
    tapped = []
    outputs = {output.name for output in proto.graph.output}
    for node in proto.graph.node:
        index = marker_index(node)
        if index is None:
            continue
        node.op_type, node.domain = "Identity", ""
        del node.attribute[:]
        tapped.append((node.output[0], modules[index][0]))
        if node.output[0] not in outputs:
            proto.graph.output.append(onnx.ValueInfoProto(name=node.output[0]))
    drop_marker_domain(proto)
    onnx.save(proto, str(path))
    return tapped


class _Tapped(nn.Module):
    """`model` returning its output and then each listed module's last output, in the list's
    order (forward hooks, which torch.export traces)."""

    def __init__(self, model: nn.Module, modules: list[nn.Module]) -> None:
        super().__init__()
        self.model, self.tapped = model, modules

    def forward(self, inputs: Tensor) -> tuple[Tensor, ...]:
        found: dict[int, Tensor] = {}
        hooks = [
            module.register_forward_hook(
                # A copy: a later in-place operator (ReLU(inplace=True)) must not change it.
                lambda _, __, output, index=index: found.__setitem__(index, output.clone())
            )
            for index, module in enumerate(self.tapped)
        ]
        try:
            output = self.model(inputs)
        finally:
            for hook in hooks:
                hook.remove()
        return (output, *(found[index] for index in range(len(self.tapped))))


def tapped_module(model: nn.Module, example: Tensor) -> tuple[nn.Module, list[str]]:
    """`model` returning its output and then the output of every module that returns a
    tensor, in the order they complete (found by one eager run), and the tracer's names of
    those (output 1 onwards)."""
    candidates = tap_points(model, example)
    completed: dict[int, None] = {}  # in the order the modules return
    hooks = [
        module.register_forward_hook(
            lambda _, __, output, index=index: (
                completed.setdefault(index) if isinstance(output, Tensor) else None
            )
        )
        for index, (_, module) in enumerate(candidates)
    ]
    try:
        with torch.no_grad():
            model(example)
    finally:
        for hook in hooks:
            hook.remove()
    kept = [candidates[index] for index in completed]
    return _Tapped(model, [module for _, module in kept]).eval(), [name for name, _ in kept]
