"""An exported QDQ graph cut into one segment per layer, each a graph a runtime can time alone,
as it runs inside the whole graph.

The cuts lie on the quantized activations (the outputs of an activation's QuantizeLinear, or
of the Clip of its integers): what an integer pipeline passes from one kernel to the next. A
layer's segment is its product node, what computes its operands from a cut (the input's
DequantizeLinear, the weight's and the bias's) and everything its output flows through up to
the next cuts: its output's Quantize/DequantizeLinear copy, the activation, a pooling, a
residual addition, and the QuantizeLinear (with its Clip) of the quantizers its output reaches.
So a segment holds exactly the nodes a runtime fuses into the layer's kernel (QLinearConv from
DequantizeLinear -> Conv -> QuantizeLinear), and a node reached from two products (a residual
addition) belongs to the later one; what only one segment reads (the QuantizeLinear of the
model's input) is that segment's. Whatever else no product reaches is the rest of the graph,
which the whole-graph measurement prices.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx
from onnx import helper, shape_inference

PRODUCTS = {"Conv", "Gemm", "MatMul"}
QUANTIZE = "QuantizeLinear"


@dataclass
class Segment:
    """One layer's nodes and the tensors they read from outside (`inputs`) and give to it
    (`outputs`)."""

    layer: str
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def sites(self, names: Iterable[str]) -> list[str]:
        """The quantizer sites of `names` (the export names a site's nodes `<site>/Quantize`,
        `<site>/Dequantize`, `<site>/Clip`; a second call of a quantizer `<site>#2`) whose
        nodes the segment holds: what its nodes depend on besides the layer."""
        names = set(names)
        held = {node.name.rpartition("/")[0].partition("#")[0] for node in self.nodes}
        return sorted(held & names)


def cut_tensors(graph: onnx.GraphProto, weights: set[str]) -> set[str]:
    """The quantized activations: each activation QuantizeLinear's output, or the output of
    the Clip that narrows its integers."""
    consumers = _consumers(graph)
    cuts = set()
    for node in graph.node:
        if node.op_type != QUANTIZE or node.input[0] in weights or _copy(node, consumers):
            continue
        output = node.output[0]
        after = consumers.get(output, [])
        if len(after) == 1 and after[0].op_type == "Clip":
            output = after[0].output[0]
        cuts.add(output)
    return cuts


def _copy(quantize: onnx.NodeProto, consumers: dict) -> bool:
    """Whether `quantize` is a copy of a quantizer further on (the export quantizes a product's
    output with the quantizer its value reaches through operators that commute with it): its
    value flows through single consumers, no product among them, into a QuantizeLinear with
    the same scale. The copy lies inside the segment; the quantizer it copies is the cut."""
    name = quantize.output[0]
    for _ in range(16):
        after = consumers.get(name, [])
        if len(after) != 1 or after[0].op_type in PRODUCTS:
            return False
        node = after[0]
        if node.op_type == QUANTIZE:
            return node.input[1] == quantize.input[1]
        name = node.output[0]
    return False


def segments(model: onnx.ModelProto, layers: Iterable[str]) -> tuple[list[Segment], list[str]]:
    """Each layer's segment of an exported graph (products named after their layers, as the
    export names them), in graph order, and the names of the nodes no segment holds."""
    graph = model.graph
    layers = set(layers)
    initializers = {tensor.name for tensor in graph.initializer}
    cuts = cut_tensors(graph, initializers)
    producer = {output: node for node in graph.node for output in node.output}
    consumers = _consumers(graph)
    order = {id(node): index for index, node in enumerate(graph.node)}
    owner: dict[int, str] = {}
    products = [node for node in graph.node if node.op_type in PRODUCTS and node.name in layers]
    for product in products:
        for node in _upstream(product, producer, cuts):
            owner.setdefault(id(node), product.name)
    for product in products:  # later products take what two reach (graph order is topological)
        for node in _downstream(product, consumers, cuts):
            if node.op_type in PRODUCTS and node is not product:
                continue
            previous = owner.get(id(node))
            if previous is None or order[id(_product_of(previous, products))] < order[id(product)]:
                owner[id(node)] = product.name
    # What only one segment reads (the quantization of the model's input) is that segment's:
    # a runtime fuses it with the layer (onnxruntime fuses the first convolution only so).
    for node in reversed(graph.node):
        readers = {owner.get(id(c)) for name in node.output for c in consumers.get(name, [])}
        if id(node) not in owner and len(readers) == 1 and None not in readers:
            owner[id(node)] = readers.pop()
    found = {p.name: Segment(p.name) for p in products}
    for node in graph.node:
        if id(node) in owner:
            found[owner[id(node)]].nodes.append(node)
    for segment in found.values():
        _boundaries(segment, graph, initializers, consumers)
    rest = [node.name for node in graph.node if id(node) not in owner]
    return list(found.values()), rest


def _product_of(layer: str, products: list[onnx.NodeProto]) -> onnx.NodeProto:
    return next(node for node in products if node.name == layer)


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def _upstream(product: onnx.NodeProto, producer: dict, cuts: set[str]) -> list[onnx.NodeProto]:
    """What computes the product's operands from cuts and stored tensors."""
    found, pending = [], list(product.input)
    while pending:
        name = pending.pop()
        node = producer.get(name)
        if name in cuts or node is None or node.op_type in PRODUCTS or node in found:
            continue
        found.append(node)
        pending.extend(node.input)
    return [product, *found]


def _downstream(product: onnx.NodeProto, consumers: dict, cuts: set[str]) -> list[onnx.NodeProto]:
    """What the product's output flows through up to the next cuts (the nodes making them
    included) or other products (excluded)."""
    found, pending = [], list(product.output)
    while pending:
        name = pending.pop()
        if name in cuts:
            continue
        for node in consumers.get(name, []):
            if node.op_type in PRODUCTS or node in found:
                continue
            found.append(node)
            pending.extend(node.output)
    return found


def _boundaries(
    segment: Segment, graph: onnx.GraphProto, initializers: set[str], consumers: dict
) -> None:
    inside = {output for node in segment.nodes for output in node.output}
    held = {id(node) for node in segment.nodes}
    graph_outputs = {output.name for output in graph.output}
    for node in segment.nodes:
        for name in node.input:
            if name and name not in inside and name not in initializers:
                if name not in segment.inputs:
                    segment.inputs.append(name)
        for name in node.output:
            outside = any(id(other) not in held for other in consumers.get(name, []))
            if outside or name in graph_outputs:
                segment.outputs.append(name)


def segment_model(
    model: onnx.ModelProto, segment: Segment, typed: onnx.ModelProto
) -> onnx.ModelProto:
    """The segment as a model of its own: its nodes, the stored tensors they read, its boundary
    tensors as inputs and outputs typed as shape inference typed them in `typed` (the whole
    model with inferred shapes)."""
    values = {value.name: value for value in typed.graph.value_info}
    values.update({value.name: value for value in typed.graph.input})
    values.update({value.name: value for value in typed.graph.output})
    read = {name for node in segment.nodes for name in node.input}
    stored = [tensor for tensor in model.graph.initializer if tensor.name in read]
    graph = helper.make_graph(
        list(segment.nodes),
        f"segment_{segment.layer}",
        [values[name] for name in segment.inputs],
        [values[name] for name in segment.outputs],
        stored,
    )
    made = helper.make_model(graph, opset_imports=list(model.opset_import))
    made.ir_version = model.ir_version
    return made


def inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every tensor's type and shape inferred (what segment_model types its
    boundaries by)."""
    return shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
