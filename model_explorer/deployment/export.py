"""A QuantizedModel written as a QDQ ONNX file (opset 21) that runtimes execute with integer
kernels: the model is traced with each enabled quantizer replaced by a marker operator (so the
graph says exactly where each quantizer sits, whatever the model's code), then each marker
becomes its QDQ form (deployment/encodings.py) and the graph is finished for runtimes
(deployment/graph.py)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import torch
from torch import Tensor, nn

from model_explorer import __version__
from model_explorer.deployment.biases import place_biases
from model_explorer.deployment.encodings import encode
from model_explorer.deployment.graph import QDQGraph
from model_explorer.deployment.inplace import drop_copy_backs
from model_explorer.errors import UserError, first_line
from model_explorer.fileio import atomic_path
from model_explorer.quantization.coverage import Coverage
from model_explorer.quantization.quantizer import TensorQuantizer, WeightQuantizer
from model_explorer.tracing.onnx_export import (
    drop_marker_domain,
    mark,
    marker_index,
    trace_marked,
)

OPSET = 21  # INT4/UINT4 and blocked DequantizeLinear
# The TorchScript exporter's highest; the operators it writes are the same at 21 (opset 21 only
# widens types), so the file declares 21.
_TRACE_OPSET = 20


@dataclass
class ExportSummary:
    """What an export wrote: the file, its size, and what the graph holds."""

    path: Path
    size: int
    quantizers: int
    folded_batch_norms: int
    quantized_outputs: int
    integer_biases: int
    formats: dict[str, int] = field(default_factory=dict)
    # the coverage of the model exported (quantization/coverage.py), where known
    coverage: Coverage | None = None


def quantizers_of(model: nn.Module) -> list[tuple[str, TensorQuantizer]]:
    """The enabled quantizers of `model`, by module name."""
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, TensorQuantizer) and module.enabled
    ]


def trace(model: nn.Module, example: Tensor, quantizers: list[tuple[str, TensorQuantizer]]):  # noqa: ANN201
    """The model's ONNX graph with one marker node per call of a quantizer (its index in
    `quantizers`)."""
    for index, (_, quantizer) in enumerate(quantizers):
        quantizer.forward = lambda x, index=index: mark(x, index)  # type: ignore[method-assign]
    try:
        return trace_marked(model, example, _TRACE_OPSET)
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever the exporter raises, said in one line
        first = first_line(error)
        raise UserError(
            f"the model cannot be exported to ONNX ({type(error).__name__}: {first}); "
            "export needs a model the TorchScript exporter can trace"
        ) from None
    finally:
        for _, quantizer in quantizers:
            del quantizer.forward


def export_qdq(
    model: nn.Module,
    example: Tensor,
    path: str | Path,
    pack: bool = True,
    metadata: dict[str, str] | None = None,
) -> ExportSummary:
    """Write `model` (a QuantizedModel, calibrated, its plan in effect) run on `example` to
    `path` in QDQ form, `metadata` in its metadata_props. `pack`: weights of up to 4 bits as
    INT4/UINT4 (else INT8, which more runtimes run with integer kernels). Nothing is written
    when the export fails."""
    _refuse_sparsity(model)
    quantizers = quantizers_of(model)
    proto = trace(model, example, quantizers)
    graph = QDQGraph(proto.graph)
    formats: dict[str, int] = {}
    nodes, seen = [], {}
    layers = {
        id(quantizer): name
        for name, layer in getattr(model, "layers", {}).items()
        for quantizer in (layer.input_quantizer, layer.weight_quantizer)
    }
    for node in proto.graph.node:
        index = marker_index(node)
        if index is None:
            nodes.append(node)
            continue
        name, quantizer = quantizers[index]
        seen[name] = seen.get(name, 0) + 1
        site_name = name if seen[name] == 1 else f"{name}#{seen[name]}"
        site = _site(graph, node, site_name, quantizer, pack)
        site.layer = layers.get(id(quantizer), "")
        formats[quantizer.format.spelling] = formats.get(quantizer.format.spelling, 0) + 1
        nodes.extend(site.nodes)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    graph.name_products()
    drop_copy_backs(graph)
    summary = ExportSummary(
        Path(path),
        0,
        len(quantizers),
        folded_batch_norms=graph.fold_batch_norms(),
        quantized_outputs=graph.quantize_outputs(),
        integer_biases=place_biases(graph),
        formats=formats,
    )
    graph.write_sites()
    _drop_dead_nodes(proto.graph)
    graph.drop_unused_initializers()
    _declare_opset(proto)
    proto.producer_name, proto.producer_version = "model_explorer", __version__
    _set_metadata(proto, metadata or {})
    onnx.checker.check_model(proto)
    _check_free_batch(proto, example)
    with atomic_path(Path(path)) as temporary:
        onnx.save(proto, str(temporary))
    summary.size = Path(path).stat().st_size
    return summary


def _drop_dead_nodes(graph: onnx.GraphProto) -> None:
    """Remove nodes whose outputs nothing reads (the exporter's Identity copies of batch-norm
    parameters that folding left unread), so the file holds only what computes its outputs."""
    needed = {output.name for output in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(node.input)
    if len(kept) < len(graph.node):
        del graph.node[:]
        graph.node.extend(reversed(kept))


def _refuse_sparsity(model: nn.Module) -> None:
    """Block sparsity drops activation blocks below a threshold while the model runs, which no
    ONNX operator does as one step: a sparsified layer is refused by name."""
    for name, layer in getattr(model, "layers", {}).items():
        if "sparsifier" in getattr(layer, "transforms", {}):
            raise UserError(
                f"layer '{name}' is block-sparsified (activation blocks below its threshold are "
                "dropped at run time), which the QDQ export has no form for; export individuals "
                "of a quantization problem"
            )


def _site(graph: QDQGraph, marker, name: str, quantizer: TensorQuantizer, pack: bool):  # noqa: ANN001, ANN202
    where = f"quantizer '{name}'"
    if not isinstance(quantizer, WeightQuantizer):
        return graph.activation_site(marker, name, encode(quantizer, None, where, pack))
    source = marker.input[0]
    if source not in graph.initializers:
        raise UserError(
            f"{where}: its weight reaches the quantizer through other operators, not as a stored "
            "tensor, so the export cannot store it as integers"
        )
    weight = torch.from_numpy(graph.array(source).copy())
    return graph.weight_site(marker, name, encode(quantizer, weight, where, pack))


def write_metadata(path: Path, props: dict[str, str]) -> None:
    """Set `props` in the ONNX file's metadata_props (replacing entries of the same keys), so
    that whoever receives the file can read which individual it is and what it was checked
    under (onnx.load(path).metadata_props; Netron shows them)."""
    proto = onnx.load(str(path))
    _set_metadata(proto, props)
    with atomic_path(path) as temporary:
        onnx.save(proto, str(temporary))


def _set_metadata(proto: onnx.ModelProto, props: dict[str, str]) -> None:
    kept = [entry for entry in proto.metadata_props if entry.key not in props]
    del proto.metadata_props[:]
    proto.metadata_props.extend(kept)
    for key, value in props.items():
        proto.metadata_props.add(key=key, value=value)


def _check_free_batch(proto: onnx.ModelProto, example: Tensor) -> None:
    """The file must take any batch size: a model that reads its batch size as a Python number
    (`len(x)`, `x.size(0)` passed on as an int) is traced with the example's batch fixed
    inside, and then fails or, worse, reshapes a batch of 2 into one sample. Checked by running
    a batch of 2 where onnxruntime is installed (unoptimised: the graph as written): it must
    give 2 outputs."""
    from model_explorer.deployment.runtimes import RuntimeUnavailable, runtime_setting

    try:
        runtime_class, setting = runtime_setting("onnxruntime:disabled")
        runtime = runtime_class(setting)
    except RuntimeUnavailable:
        return
    one = example[:1].detach().to("cpu", torch.float32).numpy()
    with tempfile.TemporaryDirectory(prefix="model_explorer_batch_") as folder, runtime:
        path = Path(folder) / "batch.onnx"
        onnx.save(proto, str(path))
        try:
            runtime.activate(path)
            runtime.run(one)
        except Exception:  # noqa: BLE001 - a graph onnxruntime cannot run is not this check's to judge
            return
        try:
            batch = runtime.run(one.repeat(2, axis=0)).shape[:1]
        except Exception:  # noqa: BLE001
            batch = ()
    if tuple(batch) != (2,):
        raise UserError(
            "the exported graph runs on a batch of 1 but not of 2: the model's code reads the "
            "batch size as a Python number (e.g. len(x)), which tracing fixes; use x.shape[0]"
        )


def _declare_opset(proto: onnx.ModelProto) -> None:
    drop_marker_domain(proto)
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = OPSET
