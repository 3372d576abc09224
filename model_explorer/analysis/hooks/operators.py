"""How ATen operators are presented to analysis hooks: opcodes and argument names, and the
quantization parameters of a quantized layer's tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from model_explorer.quantization.quantizer import TensorQuantizer, integer_bounds


@dataclass(frozen=True)
class Operator:
    """How an ATen operator is presented: its opcode and the names of its arguments."""

    opcode: str
    arguments: tuple[str, ...]


def _convolution(args: tuple) -> Operator:
    weight = args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    dims = weight.dim() - 2
    name = f"{'TransposeConv' if transposed else 'Conv'}{dims}D"
    return Operator(
        name,
        (
            "input",
            "filter",
            "bias",
            "stride",
            "padding",
            "dilation",
            "transposed",
            "output_padding",
            "groups",
        ),
    )


# ATen operator -> (opcode, argument names); activations and element-wise operations share a
# one- or two-input form.
_UNARY = ("input",)
_BINARY = ("input", "other")
OPERATORS: dict[str, Operator] = {
    "addmm": Operator("FullyConnected", ("bias", "input", "filter")),
    "mm": Operator("MatMul", ("input", "other")),
    "bmm": Operator("MatMul", ("input", "other")),
    "add": Operator("Add", _BINARY),
    "add_": Operator("Add", _BINARY),
    "sub": Operator("Sub", _BINARY),
    "mul": Operator("Mul", _BINARY),
    "mul_": Operator("Mul", _BINARY),
    "div": Operator("Div", _BINARY),
    "relu": Operator("Relu", _UNARY),
    "relu_": Operator("Relu", _UNARY),
    "hardtanh": Operator("Relu6", ("input", "min_val", "max_val")),
    "hardtanh_": Operator("Relu6", ("input", "min_val", "max_val")),
    "sigmoid": Operator("Logistic", _UNARY),
    "tanh": Operator("Tanh", _UNARY),
    "gelu": Operator("Gelu", _UNARY),
    "silu": Operator("Silu", _UNARY),
    "silu_": Operator("Silu", _UNARY),
    "hardswish": Operator("HardSwish", _UNARY),
    "hardswish_": Operator("HardSwish", _UNARY),
    "_softmax": Operator("Softmax", ("input", "dim", "half_to_float")),
    "softmax": Operator("Softmax", ("input", "dim")),
    "max_pool2d_with_indices": Operator(
        "MaxPool2D", ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
    ),
    "max_pool2d": Operator(
        "MaxPool2D", ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
    ),
    "avg_pool2d": Operator(
        "AveragePool2D",
        (
            "input",
            "kernel_size",
            "stride",
            "padding",
            "ceil_mode",
            "count_include_pad",
            "divisor_override",
        ),
    ),
    "_adaptive_avg_pool2d": Operator("AveragePool2D", ("input", "output_size")),
    "adaptive_avg_pool2d": Operator("AveragePool2D", ("input", "output_size")),
    "mean": Operator("Mean", ("input", "dim", "keepdim")),
    "cat": Operator("Concatenation", ("inputs", "dim")),
    "native_batch_norm": Operator(
        "BatchNorm",
        ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"),
    ),
    "_native_batch_norm_legit_no_training": Operator(
        "BatchNorm", ("input", "weight", "bias", "running_mean", "running_var", "momentum", "eps")
    ),
    "view": Operator("Reshape", ("input", "shape")),
    "_unsafe_view": Operator("Reshape", ("input", "shape")),
    "reshape": Operator("Reshape", ("input", "shape")),
    "flatten": Operator("Reshape", ("input", "start_dim", "end_dim")),
    "t": Operator("Transpose", _UNARY),
    "transpose": Operator("Transpose", ("input", "dim0", "dim1")),
    "permute": Operator("Transpose", ("input", "dims")),
}
# Factory functions and bookkeeping are not operators of the network.
SKIPPED = {
    "detach",
    "alias",
    "lift_fresh",
    "empty",
    "zeros",
    "ones",
    "full",
    "copy_",
    "_to_copy",
    "clone",
}


def operator_of(packet: str, args: tuple) -> Operator:
    if packet == "convolution":
        return _convolution(args)
    return OPERATORS.get(packet, Operator(packet, ()))


def quantparam(quantizer: TensorQuantizer | None) -> dict[str, Any] | None:
    """TFLite-style quantization parameters of a calibrated, enabled quantizer."""
    if quantizer is None or not quantizer.enabled or quantizer.amax is None:
        return None
    _, bound = integer_bounds(quantizer.num_bits, quantizer.unsigned, quantizer.narrow_range)
    scale = (quantizer.amax.detach().cpu().reshape(-1) / bound).tolist()
    return {
        "scale": scale,
        "zero_point": [0] * len(scale),
        "quantized_dimension": quantizer.axis if quantizer.axis is not None else 0,
    }
