"""Recorded ATen calls as Circle operators (`analyze --dalgona`): a converter per kind of
call, and `circle_ops(recording)`, the operators of one forward in execution order, named."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from model_explorer.analysis.hooks.circle import (
    BATCH_NORMS,
    NHWC,
    Builder,
    CircleOp,
    arg,
    batch_norm_factors,
    const,
    default,
    name_ops,
    operand,
    padding_mode,
    pair,
    simple,
)
from model_explorer.analysis.hooks.circle_layout import LAYOUT_CONVERTERS
from model_explorer.analysis.hooks.operators import integer_type, quantparam
from model_explorer.analysis.hooks.recording import Call, Recording, Value

Converter = Callable[[Builder, Call], None]
CONVERTERS: dict[str, Converter] = {}


def converter(*packets: str) -> Callable[[Converter], Converter]:
    def register(function: Converter) -> Converter:
        for packet in packets:
            CONVERTERS[packet] = function
        return function

    return register


def _layer_quantparams(layer: Any, factor: np.ndarray | None, axis: int) -> dict[int, dict]:
    """Quantization parameters of a quantized layer's input, filter and bias (the filter's
    scaled per channel by a folded batch norm's factor; the bias's the product of the two)."""
    if layer is None:
        return {}
    found = {0: quantparam(layer.input_quantizer), 1: quantparam(layer.weight_quantizer)}
    weights = found[1]
    if weights is not None:
        scale = np.asarray(weights["scale"], np.float64)
        if factor is not None:
            scale = scale * np.abs(factor)
        weights.update(scale=scale.tolist(), zero_point=[0] * scale.size)
        weights["quantized_dimension"] = axis if scale.size > 1 else 0
        if found[0] is not None:
            bias = found[0]["scale"][0] * scale
            found[2] = {"scale": bias.tolist(), "zero_point": [0] * bias.size}
            found[2]["quantized_dimension"] = 0
    return {i: p for i, p in found.items() if p is not None}


@converter("convolution")
def _convolution(builder: Builder, call: Call) -> None:
    x, w, bias, stride, padding, dilation, transposed, _, groups = call.args[:9]
    stride, dilation = pair(stride), pair(dilation)
    # Circle's TransposeConv has neither groups nor dilation.
    if w.data.ndim != 4 or (transposed and (groups != 1 or dilation != [1, 1])):
        return default(builder, call)
    weight = w.data.astype(np.float32)
    channels = weight.shape[1] if transposed else weight.shape[0]
    shift = bias.data if isinstance(bias, Value) else np.zeros(channels, np.float32)
    out, factor = call.outputs[0], None
    norm = builder.only_consumer(out, BATCH_NORMS)
    if norm is not None and (factors := batch_norm_factors(norm)) is not None:
        factor, norm_shift = factors
        weight = weight * (
            factor[None, :, None, None] if transposed else factor[:, None, None, None]
        )
        shift, out = shift * factor + norm_shift, norm.outputs[0]
        builder.absorb(norm)
    bias_name = bias.label if isinstance(bias, Value) else f"{call.module}.bias"
    bias_value = const(shift.astype(np.float32), bias_name)
    if transposed:
        has_bias = isinstance(bias, Value) or factor is not None
        return _transpose_conv(builder, call, weight, bias_value if has_bias else None, out)
    out, fused = builder.fuse_activation(out)
    kernel = list(weight.shape[2:])
    mode, pads = padding_mode(x.data.shape[2:], kernel, stride, dilation, pair(padding))
    source = builder.pad(x, pads, 0.0, call.module) if pads else x
    depthwise = groups > 1 and groups == x.data.shape[1]
    if groups > 1 and not depthwise:
        quantparams = _layer_quantparams(call.layer, factor, 0)
        options = {"padding": mode, "stride": stride, "dilation": dilation, "fused_act": fused}
        grouped = (source, weight, bias_value, w.label, groups)
        return _grouped_convolution(builder, call.module, grouped, out, options, quantparams)
    filter_data = weight.transpose(1, 2, 3, 0) if depthwise else weight.transpose(0, 2, 3, 1)
    options: dict[str, Any] = {
        "padding": mode,
        "stride": {"w": stride[1], "h": stride[0]},
        "dilation": {"w": dilation[1], "h": dilation[0]},
        "fused_act": fused,
    }
    if depthwise:
        options["depth_multiplier"] = channels // groups
    inputs = [source, const(np.ascontiguousarray(filter_data), w.label), bias_value]
    op = builder.emit("DepthwiseConv2D" if depthwise else "Conv2D", call.module, inputs, [out])
    op.options.update(options)
    op.quantparams = _layer_quantparams(call.layer, factor, 3 if depthwise else 0)


def _grouped_convolution(
    builder: Builder,
    module: str,
    grouped: tuple[Value, np.ndarray, Value, str | None, int],
    out: Value,
    options: dict[str, Any],
    quantparams: dict[int, dict],
) -> None:
    """A convolution with 1 < groups < in_channels as converters write it (Circle's Conv2D
    filter must span the input's channels): a Split of the input into the groups along the
    channel axis, one Conv2D per group (its slice of the filter, bias and per-channel
    quantparams), and a Concatenation of their outputs."""
    source, weight, bias, label, groups = grouped
    size = weight.shape[0] // groups
    parts = [Value(part) for part in np.split(source.data, groups, axis=1)]
    split_dim = const(np.array(3, np.int32))  # the NHWC channel axis
    builder.emit("Split", module, [split_dim, source], parts, num_split=groups)
    results = []
    for group, part in enumerate(parts):
        channels = slice(group * size, (group + 1) * size)
        filters = np.ascontiguousarray(weight[channels].transpose(0, 2, 3, 1))
        name = None if label is None else f"{label}/group_{group}"
        piece = const(bias.data[channels], f"{bias.label}/group_{group}")
        result = Value(np.ascontiguousarray(out.data[:, channels]))
        op = builder.emit("Conv2D", module, [part, const(filters, name), piece], [result])
        op.options.update(
            padding=options["padding"],
            stride={"w": options["stride"][1], "h": options["stride"][0]},
            dilation={"w": options["dilation"][1], "h": options["dilation"][0]},
            fused_act=options["fused_act"],
        )
        # The group's input is a part of the Split's (floats after a Dequantize, if quantized).
        op.quantparams = {i: _channels(p, channels) for i, p in quantparams.items() if i}
        results.append(result)
    builder.emit("Concatenation", module, results, [out], axis=3, fused_act="none")


def _channels(param: dict[str, Any], channels: slice) -> dict[str, Any]:
    """A quantparam restricted to some output channels (a per-tensor one as it is)."""
    if len(param["scale"]) <= 1:
        return param
    return {**param, "scale": param["scale"][channels], "zero_point": param["zero_point"][channels]}


def _transpose_conv(
    builder: Builder, call: Call, weight: np.ndarray, bias: Value | None, out: Value
) -> None:
    """Circle's TransposeConv: inputs (output_shape, filter OHWI, input, bias); PyTorch's
    cropping is 'VALID' (none), 'SAME' where it crops as TensorFlow does, otherwise 'VALID'
    followed by a StridedSlice."""
    x, _, _, stride, padding, dilation, _, output_padding = call.args[:8]
    stride, padding, output_padding = pair(stride), pair(padding), pair(output_padding, 0)
    size, kernel = x.data.shape[2:], weight.shape[2:]
    same = all(
        (q * s == o) and (p, p - e) == (max(k - s, 0) // 2, max(k - s, 0) - max(k - s, 0) // 2)
        for q, s, o, p, e, k in zip(
            size, stride, out.data.shape[2:], padding, output_padding, kernel, strict=True
        )
    )
    mode, result = "SAME" if same else "VALID", out
    if not same and (any(padding) or any(output_padding)):
        full = F.conv_transpose2d(
            torch.from_numpy(np.ascontiguousarray(x.data)),
            torch.from_numpy(weight),
            None if bias is None else torch.from_numpy(bias.data),
            stride=stride,
            dilation=dilation,
        )
        result = Value(full.numpy())
    shape = const(np.array([result.data.shape[i] for i in NHWC], np.int32))
    filter_data = np.ascontiguousarray(weight.transpose(1, 2, 3, 0))
    inputs = [shape, const(filter_data, call.args[1].label), x, bias]
    op = builder.emit("TransposeConv", call.module, inputs, [result], padding=mode)
    op.options["stride"] = {"w": stride[1], "h": stride[0]}
    found = _layer_quantparams(call.layer, None, 0)
    op.quantparams = {2 if i == 0 else i: p for i, p in found.items() if i < 2}
    if result is not out:
        begin = [0, padding[0], padding[1], 0]
        end = [out.data.shape[i] + begin[j] for j, i in enumerate(NHWC)]
        ends = const(np.array(end, np.int32))
        builder.emit(
            "StridedSlice",
            call.module,
            [result, const(np.array(begin, np.int32)), ends, const(np.ones(4, np.int32))],
            [out],
        )


@converter(*BATCH_NORMS)
def _batch_norm(builder: Builder, call: Call) -> None:
    """A batch norm no convolution absorbed: Mul and Add by per-channel constants (how
    converters write one), an activation fused into the Add."""
    factors = batch_norm_factors(call)
    x = call.args[0]
    if factors is None or x.data.ndim != 4:
        return default(builder, call)
    scale, shift = factors
    scaled = Value(x.data * scale[None, :, None, None])
    builder.emit("Mul", call.module, [x, const(scale)], [scaled])
    out, fused = builder.fuse_activation(call.outputs[0])
    builder.emit("Add", call.module, [scaled, const(shift)], [out], fused_act=fused)


@converter("addmm", "mm")
def _fully_connected(builder: Builder, call: Call) -> None:
    """A linear layer: FullyConnected(input, weights (out, in), bias); a missing bias is a zero
    constant, as converters write one."""
    if call.packet == "addmm":
        bias, x, weight = call.args[:3]
    else:
        (x, weight), bias = call.args[:2], None
    if not (isinstance(weight, Value) and weight.is_const and weight.data.ndim == 2):
        return simple(builder, call)
    # A linear layer's weight arrives as its transposed view, whose Value holds the weight
    # itself, (out, in) as Circle's; a matrix multiplied as it is is (in, out).
    if weight.view == "t":
        weights = weight
    else:
        weights = const(np.ascontiguousarray(weight.data.T), weight.label)
    if not isinstance(bias, Value):
        bias = const(np.zeros(weights.data.shape[0], np.float32), f"{call.module}.bias")
    out, fused = builder.fuse_activation(call.outputs[0])
    op = builder.emit("FullyConnected", call.module, [x, weights, bias], [out], fused_act=fused)
    op.quantparams = _layer_quantparams(call.layer, None, 0)


@converter("add", "add_")
def _add(builder: Builder, call: Call) -> None:
    x, y = call.args[:2]
    if not isinstance(x, Value) or arg(call, 2, 1) != 1:
        return simple(builder, call)
    out, fused = builder.fuse_activation(call.outputs[0])
    builder.emit("Add", call.module, [x, operand(y)], [out], fused_act=fused)


@converter("silu", "silu_")
def _silu(builder: Builder, call: Call) -> None:
    """x * sigmoid(x): Logistic then Mul (Circle has no SiLU)."""
    x = call.args[0]
    gate = Value(1.0 / (1.0 + np.exp(-x.data)))
    builder.emit("Logistic", call.module, [x], [gate])
    builder.emit("Mul", call.module, [x, gate], call.outputs[:1])


@converter("max_pool2d_with_indices", "max_pool2d", "avg_pool2d")
def _pool(builder: Builder, call: Call) -> None:
    x, kernel = call.args[0], pair(arg(call, 1))
    stride, padding = pair(arg(call, 2) or kernel), pair(arg(call, 3, 0), 0)
    average = call.packet == "avg_pool2d"
    dilation = [1, 1] if average else pair(arg(call, 4, 1))
    mode, pads = padding_mode(x.data.shape[2:], kernel, stride, dilation, padding)
    if pads is not None:
        # Max pooling pads with the lowest float; average pooling counting the padding, zeros.
        fill = 0.0 if average else float(np.finfo(np.float32).min)
        x = builder.pad(x, pads, fill, call.module)
    op = builder.emit(
        "AveragePool2D" if average else "MaxPool2D", call.module, [x], call.outputs[:1]
    )
    op.options.update(padding=mode, stride={"w": stride[1], "h": stride[0]})


def circle_ops(recording: Recording) -> list[CircleOp]:
    """The Circle operators of a recorded forward, in execution order, named."""
    builder = Builder(recording)
    for call in recording.calls:
        if id(call) in builder.absorbed:
            continue
        convert = (
            CONVERTERS.get(call.packet)
            or LAYOUT_CONVERTERS.get(call.opcode)
            or LAYOUT_CONVERTERS.get(call.packet, simple)
        )
        convert(builder, call)
    name_ops(builder.ops)
    return fake_quantization(builder.ops)


FQ_QUANTIZE, FQ_DEQUANTIZE = "_FQ_Quantize", "_FQ_Dequantize"


def fake_quantization(ops: list[CircleOp]) -> list[CircleOp]:
    """`ops` with a Quantize and a Dequantize operator before every activation an integer
    input quantizer quantizes, as in ONE's fake-quantized Circle model (circle-quantizer's
    fake quantization, what visq and the GenGolden analyses run on): `<T>_FQ_Quantize` (the
    integers, with their quantparam) and `<T>_FQ_Quantize_FQ_Dequantize` (the float values the
    consumer reads) after the tensor T that was quantized, one pair per quantized tensor."""
    pairs: dict[int, Value] = {}
    presented: list[CircleOp] = []
    names: set[str] = set()
    for op in ops:
        for index, value in enumerate(op.inputs):
            if value is None or value.source is None or value.is_const:
                continue
            if quantparam(value.quantizer) is None:
                continue  # a format without integers: the consumer reads the values as they are
            if id(value) not in pairs:
                pairs[id(value)] = _quantize_dequantize(value, op.module, presented, names)
            op.inputs[index] = pairs[id(value)]
            op.quantparams.pop(index, None)  # the consumer reads floats, as Dequantize gives
        presented.append(op)
    return presented


def _quantize_dequantize(
    value: Value, module: str, presented: list[CircleOp], names: set[str]
) -> Value:
    """The pair for one quantized tensor; a tensor that several layers quantize each with a
    quantizer of its own gets a pair per quantizer, the later ones named `<T>@<layer>`."""
    param = quantparam(value.quantizer) or {}
    scale = np.asarray(param["scale"], np.float64)
    axis = param["quantized_dimension"]
    if scale.size > 1:  # per channel, along the axis of PyTorch's layout
        scale = scale.reshape([-1 if i == axis else 1 for i in range(value.data.ndim)])
        if value.nchw and value.data.ndim == 4:
            param["quantized_dimension"] = NHWC.index(axis)
    zero = np.asarray(param["zero_point"]).reshape(scale.shape) if scale.size == 1 else 0
    steps = (np.rint(value.data / scale) + zero).astype(integer_type(value.quantizer))
    tensor = value.source.label
    tensor = tensor if tensor not in names else f"{tensor}@{module}"
    names.add(tensor)
    name = f"{tensor}{FQ_QUANTIZE}"
    integers = Value(steps, name=name, nchw=value.nchw)
    integers.quantparam = param
    floats = Value(value.data, name=name + FQ_DEQUANTIZE, nchw=value.nchw)
    presented.append(CircleOp("Quantize", module, [value.source], [integers], name=name))
    presented.append(CircleOp("Dequantize", module, [integers], [floats], name=floats.name))
    return floats
