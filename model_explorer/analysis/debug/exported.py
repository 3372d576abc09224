"""The same per-layer errors measured in a runtime on the exported file: each layer's input
before its QuantizeLinear and after its DequantizeLinear, taken out of the runtime as graph
outputs (as onnxruntime's `qdq_loss_debug.modify_model_output_intermediate_tensors` takes
them, which also keeps the runtime from fusing across them), beside the float model's input to
that layer computed in PyTorch: onnxruntime's `qdq_err` and `xmodel_err` of the file."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import onnx
import torch

from model_explorer.analysis.debug.errors import SQNR, layer_io
from model_explorer.deployment.runtimes import as_input, open_runtime

RUNTIME_COLUMNS = ("local_db", "accumulated_db")


def quantizer_tensors(proto: onnx.ModelProto, model: Any) -> dict[str, list[tuple[str, str]]]:
    """Layer -> per call of its input quantizer in the file, (the tensor the quantizer reads,
    the dequantized tensor the layer reads), found by the names export gives a site's nodes
    (`<quantizer>/Quantize`, `/Dequantize`, a 16-bit type's `/Clip` before them; a later call's
    `<quantizer>#2/...`, `#3`, ...: a recurrent layer's hidden product, once per time step);
    layers whose input quantizer the file does not hold (off, or moved by the export) are left
    out."""
    paths = {id(module): name for name, module in model.named_modules()}
    nodes = {node.name: node for node in proto.graph.node}
    producers = {output: node for node in proto.graph.node for output in node.output}
    found: dict[str, list[tuple[str, str]]] = {}
    for layer_name, layer in model.layers.items():
        path = paths.get(id(layer.input_quantizer))
        for call in itertools.count(1):
            site = path if call == 1 else f"{path}#{call}"
            quantize, dequantize = nodes.get(f"{site}/Quantize"), nodes.get(f"{site}/Dequantize")
            if path is None or quantize is None or dequantize is None:
                break
            before = quantize.input[0]
            clip = producers.get(before)
            if clip is not None and clip.name == f"{site}/Clip":
                before = clip.input[0]
            found.setdefault(layer_name, []).append((before, dequantize.output[0]))
    return found


def tapped(proto: onnx.ModelProto, tensors: Iterable[str]) -> onnx.ModelProto:
    """A copy of `proto` with `tensors` among its graph outputs."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    outputs = {output.name for output in copy.graph.output}
    for name in tensors:
        if name not in outputs:
            copy.graph.output.append(onnx.ValueInfoProto(name=name))
            outputs.add(name)
    return copy


@torch.no_grad()
def runtime_errors(
    model: Any, batches: Iterable[Any], path: Path, runtime: str
) -> dict[str, dict[str, float]]:
    """Layer -> `local_db` and `accumulated_db` of the exported file at `path` run by `runtime`
    (a name or NAME:SETTING), over the batches given (each `(inputs, ...)`); `model` is the
    QuantizedModel the file was exported from, its plan in effect."""
    proto = onnx.load(str(path))
    tensors = quantizer_tensors(proto, model)
    meters = {layer: {column: SQNR() for column in RUNTIME_COLUMNS} for layer in tensors}
    layers = {name: model.layers[name] for name in tensors}
    with tempfile.TemporaryDirectory(prefix="model_explorer_debug_") as folder:
        file = Path(folder) / "tapped.onnx"
        names = [name for pairs in tensors.values() for pair in pairs for name in pair]
        onnx.save(tapped(proto, names), str(file))
        with open_runtime(runtime, file) as session:
            for batch in batches:
                outputs = session.infer(as_input(batch[0]))
                with model.preserved_settings():
                    model.set_enabled(False)
                    floats, _ = layer_io(model, layers, batch[0])
                for layer, pairs in tensors.items():
                    calls = floats.get(layer, [])
                    for index, (before, after) in enumerate(pairs):
                        meters[layer]["local_db"].add(outputs[before], outputs[after])
                        if index < len(calls):
                            meters[layer]["accumulated_db"].add(calls[index][0], outputs[after])
    return {layer: {c: m.db for c, m in columns.items()} for layer, columns in meters.items()}
