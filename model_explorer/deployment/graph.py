"""The traced graph turned into QDQ form: each quantizer's marker replaced by its QDQ nodes,
batch norms folded into the quantized convolutions before them, and quantized outputs where a
runtime's integer kernels need them (the biases: biases.py).

What the search computed is kept: a batch norm after a quantized convolution scales each output
channel, so it is folded into that channel's weight scale (the stored integers are the search's;
a negative factor negates them), and the bias absorbs its shift. A convolution's output is
quantized (a copy of the next quantizer) only where what lies between them commutes with that
quantizer (ReLU, max pooling, reshapes: `COMMUTING`; a Clip, ReLU6, where the quantizer maps
its bounds to its own end levels; where the value branches, every branch
must reach a quantizer on the same grid), so the values are the same and a runtime can fuse
DequantizeLinear -> Conv -> QuantizeLinear into one integer kernel; where an addition or an
average lies between, the convolution stays a float one and the runtime says so, unless the
model quantizes the addition's operands or the average's input
(`quantization.operand_quantizers`). An addition of two integer operands gets its output
quantized by the same rule (onnxruntime's QLinearAdd).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from model_explorer.deployment.encodings import Encoding, scale_channels

# Operators y = f(x) with Q(f(x)) = f(Q(x)) for a symmetric quantizer (zero point 0) per tensor.
COMMUTING = {
    "Relu",
    "MaxPool",
    "Flatten",
    "Reshape",
    "Transpose",
    "Identity",
    "Squeeze",
    "Unsqueeze",
}
KERNELS = {"Conv", "Gemm", "MatMul"}
# Nodes whose output is quantized where they read integer operands: products, and additions
# (of the operands quantization.operand_quantizers quantizes), which runtimes then run on
# integers too (onnxruntime's QLinearAdd).
OUTPUT_QUANTIZED = KERNELS | {"Add"}


@dataclass
class Site:
    """One quantizer in the graph: its encoding and the names of its initializers."""

    name: str
    encoding: Encoding
    weight: bool
    # Q, (Clip,) DQ for an activation; DQ for a weight
    nodes: list = field(default_factory=list)
    layer: str = ""  # the layer of the QuantizedModel it belongs to

    @property
    def parameters(self) -> list[str]:
        """The initializers Quantize/DequantizeLinear read: the scale and, for an integer type,
        the zero point (an FP8 type has none, see encodings.py)."""
        names = [f"{self.name}_scale"]
        return names if self.encoding.zero_point is None else [*names, f"{self.name}_zero_point"]

    @property
    def dequantized(self) -> str:
        return self.nodes[-1].output[0]


class QDQGraph:
    """Rewrites one graph in place; `sites` maps each DequantizeLinear output to its Site."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.graph = graph
        self.initializers = {tensor.name: tensor for tensor in graph.initializer}
        self.sites: dict[str, Site] = {}
        self.quantized_outputs: set[str] = set()  # the nodes whose output is quantized

    # -- helpers ---------------------------------------------------------------------------
    def producer(self, name: str) -> onnx.NodeProto | None:
        return next((node for node in self.graph.node if name in node.output), None)

    def consumers(self, name: str) -> list[onnx.NodeProto]:
        return [node for node in self.graph.node if name in node.input]

    def is_output(self, name: str) -> bool:
        return any(output.name == name for output in self.graph.output)

    def array(self, name: str) -> np.ndarray:
        return numpy_helper.to_array(self.initializers[name])

    def constant(self, name: str) -> np.ndarray | None:
        """The stored values of `name`: an initializer, a Constant node's value (the exporter
        writes a padded convolution's bias, and Clip's bounds, so), or one behind Identity
        nodes (the exporter shares equal tensors, e.g. the fresh batch norms of an untrained
        model, so); None for a computed value."""
        while name not in self.initializers:
            node = self.producer(name)
            if node is not None and node.op_type == "Constant":
                value = next((a for a in node.attribute if a.name == "value"), None)
                return None if value is None else numpy_helper.to_array(value.t)
            if node is None or node.op_type != "Identity":
                return None
            name = node.input[0]
        return self.array(name)

    def set_initializer(self, name: str, values: np.ndarray) -> str:
        tensor = numpy_helper.from_array(np.asarray(values), name)
        old = self.initializers.get(name)
        if old is not None:
            self.graph.initializer.remove(old)
        self.graph.initializer.append(tensor)
        self.initializers[name] = tensor
        return name

    def drop_unused_initializers(self) -> None:
        used = {name for node in self.graph.node for name in node.input}
        for tensor in list(self.graph.initializer):
            if tensor.name not in used:
                self.graph.initializer.remove(tensor)
                del self.initializers[tensor.name]

    # -- quantizers ------------------------------------------------------------------------
    def qdq_nodes(self, source: str, target: str, site: Site, prefix: str) -> list:
        """QuantizeLinear, a Clip of the integers where the levels are fewer than the type's,
        and DequantizeLinear from `source` to `target`, reading the site's initializers. A
        16-bit type is clipped in float before QuantizeLinear instead, at the levels' values
        (the same levels: round(clip(x, l*s, h*s) / s) = clip(round(x / s), l, h)), as
        onnxruntime has no Clip kernel for INT16/UINT16."""
        encoding = site.encoding
        parameters = site.parameters
        axis = {} if encoding.axis is None else {"axis": encoding.axis}
        typed = {} if encoding.integer else {"output_dtype": encoding.onnx_type}
        quantized = f"{prefix}_quantized"
        nodes = []
        if encoding.clipped and not eight_bit(site):
            low, high = f"{site.name}_low", f"{site.name}_high"
            step = encoding.scale.astype(np.float32)
            self.set_initializer(low, (step * np.float32(encoding.low - encoding.zero)))
            self.set_initializer(high, (step * np.float32(encoding.high - encoding.zero)))
            clipped = f"{prefix}_clipped"
            nodes.append(helper.make_node("Clip", [source, low, high], [clipped], f"{prefix}/Clip"))
            source = clipped
        nodes.append(
            helper.make_node(
                "QuantizeLinear",
                [source, *parameters],
                [quantized],
                f"{prefix}/Quantize",
                **axis,
                **typed,
            )
        )
        if encoding.clipped and eight_bit(site):
            low, high = f"{site.name}_low", f"{site.name}_high"
            self.set_initializer(low, np.array(encoding.low, dtype=encoding.dtype))
            self.set_initializer(high, np.array(encoding.high, dtype=encoding.dtype))
            clipped = f"{prefix}_clipped"
            nodes.append(
                helper.make_node("Clip", [quantized, low, high], [clipped], f"{prefix}/Clip")
            )
            quantized = clipped
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [quantized, *parameters],
                [target],
                f"{prefix}/Dequantize",
                **axis,
            )
        )
        return nodes

    def activation_site(self, marker: onnx.NodeProto, name: str, encoding: Encoding) -> Site:
        site = Site(name, encoding, weight=False)
        site.nodes = self.qdq_nodes(marker.input[0], marker.output[0], site, name)
        self.sites[marker.output[0]] = site
        return site

    def weight_site(self, marker: onnx.NodeProto, name: str, encoding: Encoding) -> Site:
        site = Site(name, encoding, weight=True)
        axis = {} if encoding.axis is None else {"axis": encoding.axis}
        if encoding.block_size is not None:
            axis["block_size"] = encoding.block_size
        inputs = [f"{name}_quantized", *site.parameters]
        site.nodes = [
            helper.make_node(
                "DequantizeLinear", inputs, [marker.output[0]], f"{name}/Dequantize", **axis
            )
        ]
        self.sites[marker.output[0]] = site
        return site

    def write_sites(self) -> None:
        """Every site's initializers from its (possibly folded) encoding, and its nodes' axis:
        folding a batch norm makes a per-tensor weight scale per output channel (axis 0)."""
        written = {node.name: node for node in self.graph.node}  # copies of site.nodes
        for site in self.sites.values():
            encoding = site.encoding
            if encoding.axis is not None:
                for node in site.nodes:
                    _set_axis(written[node.name], encoding.axis)
            self.set_initializer(f"{site.name}_scale", encoding.scale.astype(np.float32))
            if encoding.zero_point is not None:
                self.set_initializer(f"{site.name}_zero_point", encoding.zero_point)
            if site.weight:
                self.set_initializer(f"{site.name}_quantized", encoding.values)

    def name_products(self) -> None:
        """Name each product after the layer whose weight it reads, so that what a runtime
        reports about its kernels (onnxruntime's optimised graph, OpenVINO's runtime model)
        names the layers a plan names. A layer called more than once (a recurrent layer's
        hidden product, once per time step) names its later products `<layer>/call_<n>`:
        node names are unique, and `layer_of` reads them back as the layer."""
        calls: dict[str, int] = {}
        for node in self.graph.node:
            site = self.sites.get(node.input[1]) if len(node.input) > 1 else None
            if node.op_type in KERNELS and site is not None and site.layer:
                count = calls[site.layer] = calls.get(site.layer, 0) + 1
                node.name = site.layer if count == 1 else f"{site.layer}/call_{count - 1}"

    # -- batch norms -----------------------------------------------------------------------
    def fold_batch_norms(self) -> int:
        """Fold each BatchNormalization that alone reads a convolution with a quantized weight
        (per tensor, per output channel or per block) into the weight's scales and the bias."""
        folded = 0
        for norm in [node for node in self.graph.node if node.op_type == "BatchNormalization"]:
            conv = self.producer(norm.input[0])
            if conv is None or conv.op_type != "Conv" or len(self.consumers(norm.input[0])) != 1:
                continue
            site = self.sites.get(conv.input[1])
            if site is None or len(self.consumers(conv.input[1])) != 1:
                continue
            values = [self.constant(name) for name in norm.input[1:5]]
            if any(value is None for value in values):
                continue
            gamma, beta, mean, variance = values
            epsilon = next((a.f for a in norm.attribute if a.name == "epsilon"), 1e-5)
            factor = gamma / np.sqrt(variance + epsilon)
            bias = self.constant(conv.input[2]) if len(conv.input) > 2 else np.zeros_like(mean)
            if bias is None:  # a computed bias: not folded
                continue
            bias_name = self.set_initializer(
                f"{site.name}_folded_bias", factor * (bias - mean) + beta
            )
            conv.input[2:] = [bias_name]
            scale_channels(site.encoding, factor.astype(np.float32))
            conv.output[0] = norm.output[0]
            self.graph.node.remove(norm)
            folded += 1
        return folded

    # -- integer kernels -------------------------------------------------------------------
    def quantize_outputs(self) -> int:
        """Quantize each quantized product's output, and each addition's of two integer
        operands, with the quantizer its value reaches next through commuting operators only
        (see the module's text); an output a quantizer reads directly is quantized already.
        Returns how many outputs are quantized."""
        quantized = 0
        for kernel in [node for node in self.graph.node if node.op_type in OUTPUT_QUANTIZED]:
            if not self._integer_operands(kernel):
                continue
            target = self._next_quantizer(kernel.output[0])
            if target is None:
                continue
            quantized += 1
            self.quantized_outputs.add(kernel.name)
            if all(n.op_type == "QuantizeLinear" for n in self.consumers(kernel.output[0])):
                continue
            output = kernel.output[0]
            kernel.output[0] = f"{output}_float"
            prefix = f"{kernel.name}_output"
            nodes = self.qdq_nodes(kernel.output[0], output, target, prefix)
            position = list(self.graph.node).index(kernel) + 1
            for offset, node in enumerate(nodes):
                self.graph.node.insert(position + offset, node)
        return quantized

    def _integer_operands(self, kernel: onnx.NodeProto) -> bool:
        sites = [self.sites.get(name) for name in kernel.input[:2]]
        return all(site is not None and site.encoding.integer for site in sites)

    def _next_quantizer(self, name: str) -> Site | None:
        """The integer per-tensor quantizer that every path from `name` reaches through
        commuting operators only (several where they share one grid, as quantizers calibrated
        on the same tensor do), or None."""
        if self.is_output(name):
            return None
        found = []
        for node in self.consumers(name):
            if node.op_type == "QuantizeLinear":
                site = self.sites.get(self._dequantized_by(node))
                ok = site is not None and site.encoding.integer and site.encoding.axis is None
            elif node.op_type in COMMUTING and list(node.input) == [name]:
                site = self._next_quantizer(node.output[0])
                ok = site is not None
            elif node.op_type == "Clip" and node.input[0] == name:
                site = self._next_quantizer(node.output[0])
                ok = site is not None and self._inside_clip(node, site)
            else:
                return None
            if not ok:
                return None
            found.append(site)
        if not found or not all(_same_grid(found[0], site) for site in found[1:]):
            return None
        return found[0]

    def _inside_clip(self, clip: onnx.NodeProto, site: Site) -> bool:
        """Whether `site` quantizes the Clip's constant bounds to its own lowest and highest
        levels (ReLU6's [0, 6] before an unsigned quantizer of amax near 6: each bound within
        half a level of the range's end): then Q(Clip(x)) = Q(x), and quantizing the value
        before the Clip changes nothing."""
        bounds = []
        for index, default in ((1, -np.inf), (2, np.inf)):
            name = clip.input[index] if len(clip.input) > index else ""
            value = self.constant(name) if name else np.array(default)
            if value is None or value.size != 1:
                return False
            bounds.append(float(value.reshape(())))
        encoding = site.encoding
        scale = np.asarray(encoding.scale, dtype=np.float64).reshape(-1)
        if scale.size != 1 or not scale[0] > 0:  # per tensor only
            return False
        lowest, highest = (bound / scale[0] + encoding.zero for bound in bounds)
        return lowest < encoding.low + 0.5 and highest > encoding.high - 0.5

    def _dequantized_by(self, quantize: onnx.NodeProto) -> str:
        name = quantize.output[0]
        for _ in range(2):  # through the Clip, if there is one
            node = self.consumers(name)
            if len(node) != 1:
                return ""
            if node[0].op_type == "DequantizeLinear":
                return node[0].output[0]
            name = node[0].output[0]
        return ""


def _set_axis(node: onnx.NodeProto, axis: int) -> None:
    kept = [attribute for attribute in node.attribute if attribute.name != "axis"]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute("axis", axis)])


def _same_grid(one: Site, other: Site) -> bool:
    """Two activation quantizers that quantize every value alike."""
    a, b = one.encoding, other.encoding
    return (a.dtype, a.low, a.high, a.zero) == (b.dtype, b.low, b.high, b.zero) and bool(
        np.array_equal(a.scale, b.scale)
    )


def eight_bit(site: Site | None) -> bool:
    """True for an integer site stored as INT8 or UINT8, what integer kernels read."""
    return site is not None and np.dtype(site.encoding.dtype) in _EIGHT_BIT


_EIGHT_BIT = (np.dtype(np.int8), np.dtype(np.uint8))
