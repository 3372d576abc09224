"""How ATen operators are sorted and named: the one classification every consumer of the tracer
(cost table, data lineage, analysis hooks, dalgona's recording, compare's localisation) sees.

An ATen call of a forward pass is one of:

- a **factory**: it reads no tensor (or only a tensor's shape: `zeros_like`); not an operator,
  its output is a constant;
- **transparent**: its output is its input under another identity (`detach`, `clone`,
  `_to_copy`, `copy_` into a buffer, ...); not an operator, the output stands for the input;
- a **view of a constant**: a view (`t`, `view`, `expand`, `select`, ... and every ATen view)
  of a parameter, a buffer or a quantized weight; not an operator, the output stands for the
  constant (a linear layer's transposed weight is that weight);
- an **operator** of the network, named `<module>/<Opcode>#<n>`: the n-th operator of that
  opcode in the innermost module running it (`<Opcode>#<n>` in the model itself). A view of an
  activation (reshape, transpose, select) is an operator that moves no data (`view`).

Opcodes follow the Circle/TFLite names the analysis hooks present (Conv2D, FullyConnected, Add,
Reshape, ...); an ATen operator without one keeps its ATen name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The output is the input (its values) under another identity.
TRANSPARENT = frozenset(
    {
        "detach",
        "alias",
        "lift_fresh",
        "lift_fresh_copy",
        "clone",
        "_to_copy",
        "contiguous",
        "copy_",  # copy_(destination, source): the destination now holds the source
        "as_strided_",  # restrides an output in place (memory format), values unchanged
    }
)
# Tensors made from another's shape only; like factories, they read no value.
FACTORIES = frozenset(
    {
        "empty_like",
        "zeros_like",
        "ones_like",
        "full_like",
        "new_empty",
        "new_zeros",
        "new_ones",
        "new_full",
    }
)
# Views besides those ATen declares as views: they reorder or reshape without arithmetic.
VIEWS = frozenset({"t", "view", "_unsafe_view", "reshape", "flatten", "permute", "transpose"})


def transparent_source(packet: str, args: tuple[Any, ...]) -> Any:
    """The argument a transparent operator's output stands for."""
    return args[1] if packet == "copy_" else args[0]


def is_view(func: Any, packet: str) -> bool:
    return bool(getattr(func, "is_view", False)) or packet in VIEWS


@dataclass(frozen=True)
class Operator:
    """How an ATen operator is presented: its opcode and the names of its arguments."""

    opcode: str
    arguments: tuple[str, ...]


_CONVOLUTION_ARGUMENTS = (
    "input",
    "filter",
    "bias",
    "stride",
    "padding",
    "dilation",
    "transposed",
    "output_padding",
    "groups",
)
_UNARY = ("input",)
_BINARY = ("input", "other")
_POOL = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
_AVERAGE_POOL = (
    "input",
    "kernel_size",
    "stride",
    "padding",
    "ceil_mode",
    "count_include_pad",
    "divisor_override",
)
_BATCH_NORM = ("input", "weight", "bias", "running_mean", "running_var")

# ATen operator -> (opcode, argument names); activations and element-wise operations share a
# one- or two-input form.
OPERATORS: dict[str, Operator] = {
    "addmm": Operator("FullyConnected", ("bias", "input", "filter")),
    "mm": Operator("MatMul", _BINARY),
    "bmm": Operator("MatMul", _BINARY),
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
    "max_pool2d_with_indices": Operator("MaxPool2D", _POOL),
    "max_pool2d": Operator("MaxPool2D", _POOL),
    "avg_pool2d": Operator("AveragePool2D", _AVERAGE_POOL),
    "_adaptive_avg_pool2d": Operator("AveragePool2D", ("input", "output_size")),
    "adaptive_avg_pool2d": Operator("AveragePool2D", ("input", "output_size")),
    "mean": Operator("Mean", ("input", "dim", "keepdim")),
    "cat": Operator("Concatenation", ("inputs", "dim")),
    "native_batch_norm": Operator("BatchNorm", (*_BATCH_NORM, "training", "momentum", "eps")),
    "_native_batch_norm_legit_no_training": Operator(
        "BatchNorm", (*_BATCH_NORM, "momentum", "eps")
    ),
    "view": Operator("Reshape", ("input", "shape")),
    "_unsafe_view": Operator("Reshape", ("input", "shape")),
    "reshape": Operator("Reshape", ("input", "shape")),
    "flatten": Operator("Reshape", ("input", "start_dim", "end_dim")),
    "squeeze": Operator("Reshape", ("input", "dim")),
    "unsqueeze": Operator("Reshape", ("input", "dim")),
    "t": Operator("Transpose", _UNARY),
    "transpose": Operator("Transpose", ("input", "dim0", "dim1")),
    "permute": Operator("Transpose", ("input", "dims")),
}
FULLY_CONNECTED = Operator("FullyConnected", ("input", "filter"))  # a linear layer without bias


def operator_of(packet: str, args: tuple[Any, ...], weight_second: bool = False) -> Operator:
    """The presentation of an ATen operator; `weight_second`: its second argument is a weight
    (a matrix product with one is a linear layer)."""
    if packet == "convolution":
        weight = args[1]
        transposed = bool(args[6]) if len(args) > 6 else False
        name = f"{'TransposeConv' if transposed else 'Conv'}{weight.dim() - 2}D"
        return Operator(name, _CONVOLUTION_ARGUMENTS)
    if packet == "mm" and weight_second:
        return FULLY_CONNECTED
    return OPERATORS.get(packet, Operator(packet, ()))
