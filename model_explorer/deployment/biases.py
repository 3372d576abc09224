"""Biases of the exported products as the search computed them: a float bias added after the
product, or, where a runtime fuses the product into an integer kernel (8-bit operands and a
quantized output), an INT32 bias at input scale x weight scale, the form integer kernels read."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from model_explorer.deployment.encodings import Encoding
from model_explorer.deployment.graph import QDQGraph, Site, eight_bit


def place_biases(graph: QDQGraph) -> int:
    """Biases as the search computed them: a float bias added to the product, as an Add
    after it (a runtime would otherwise round a float bias of a product of quantized
    operands to INT32 at the scale input scale x weight scale, coarse where those are
    few-bit scales). Only a product of 8-bit integer operands whose output is quantized
    takes its bias as INT32 at that scale, the form integer kernels read (an error of half
    that scale at most). Returns how many biases are integers."""
    integer = 0
    for kernel in [node for node in graph.graph.node if node.op_type in ("Conv", "Gemm")]:
        if len(kernel.input) < 3 or graph.constant(kernel.input[2]) is None:
            continue
        activation, weight = (graph.sites.get(name) for name in kernel.input[:2])
        if activation is None or weight is None:
            continue
        if kernel.name in graph.quantized_outputs and _integer_bias(
            graph, kernel, activation, weight
        ):
            integer += 1
        else:
            _bias_after(graph, kernel)
    return integer


def _integer_bias(graph: QDQGraph, kernel: onnx.NodeProto, activation: Site, weight: Site) -> bool:
    if not (eight_bit(activation) and eight_bit(weight)) or activation.encoding.clipped:
        return False
    if weight.encoding.block_size is not None or weight.encoding.axis not in (None, 0):
        return False
    bias = graph.constant(kernel.input[2])
    if not np.all(activation.encoding.scale > 0):
        return False
    _fit_bias(weight.encoding, bias, float(activation.encoding.scale))
    scale = (activation.encoding.scale * weight.encoding.scale).astype(np.float32)
    levels = np.round(bias / scale)
    if np.abs(levels).max(initial=0) >= 2**31 or not np.all(scale > 0):
        return False
    name = f"{weight.name}_bias"
    graph.set_initializer(f"{name}_quantized", levels.astype(np.int32))
    graph.set_initializer(f"{name}_scale", np.broadcast_to(scale, levels.shape).copy())
    graph.set_initializer(f"{name}_zero_point", np.zeros(levels.shape, np.int32))
    dequantize = helper.make_node(
        "DequantizeLinear",
        [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
        [f"{name}_dequantized"],
        f"{name}/Dequantize",
        axis=0,
    )
    graph.graph.node.insert(list(graph.graph.node).index(kernel), dequantize)
    kernel.input[2] = f"{name}_dequantized"
    return True


def _bias_after(graph: QDQGraph, kernel: onnx.NodeProto) -> None:
    """Take the bias out of `kernel` into an Add after it (broadcast over a convolution's
    spatial axes)."""
    bias = graph.constant(kernel.input[2])
    if kernel.op_type == "Conv":
        dims = len(next(a.ints for a in kernel.attribute if a.name == "kernel_shape"))
        bias = bias.reshape((-1,) + (1,) * dims)
    name = graph.set_initializer(f"{kernel.name}_bias", bias)
    del kernel.input[2:]
    output = kernel.output[0]
    kernel.output[0] = f"{output}_without_bias"
    add = helper.make_node("Add", [kernel.output[0], name], [output], f"{kernel.name}/bias")
    graph.graph.node.insert(list(graph.graph.node).index(kernel) + 1, add)


# The largest INT32 bias level written: a channel's bias beyond it at input scale x weight
# scale gets a coarser weight scale (_fit_bias).
BIAS_LEVELS = 2**30


def _fit_bias(weight: Encoding, bias: np.ndarray, input_scale: float) -> None:
    """Coarser weight scales for the output channels whose bias would exceed BIAS_LEVELS at
    input scale x weight scale: near-dead channels, whose folded batch norm left weights of
    1e-7 beside a bias of 1 (EfficientNet-Lite0's expansion convolutions have such). The
    channel's stored values are requantized to the coarser scale (they shrink, so they fit);
    its product moves by half a new level per weight at most, |bias| x fan-in x 2**-31 x the
    largest level, against the whole channel (1e-5 of its bias at a fan-in of 96). Weights
    quantized per tensor or per channel along axis 0 only; any other is left as it is."""
    if weight.axis not in (None, 0) or weight.block_size is not None or weight.values is None:
        return
    channels = weight.values.shape[0]
    if bias.size != channels:
        return
    scale = np.broadcast_to(np.asarray(weight.scale, np.float64).reshape(-1), (channels,))
    needed = np.abs(bias.astype(np.float64).reshape(-1)) / (input_scale * BIAS_LEVELS)
    coarse = needed > scale
    if not coarse.any():
        return
    flat = weight.values.astype(np.float64).reshape(channels, -1)
    flat[coarse] = np.round(flat[coarse] * (scale[coarse] / needed[coarse])[:, None])
    weight.values = flat.reshape(weight.values.shape).astype(weight.dtype)
    weight.scale = np.where(coarse, needed, scale).astype(np.float32)
    weight.axis = 0
