"""The pieces of presenting a recorded forward as the Circle model converted from it would be
(`analyze --dalgona`): Circle operators, the builder that folds and fuses recorded calls into
them, padding as 'SAME'/'VALID' (or an explicit Pad), batch-norm factors, NHWC data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model_explorer.analysis.hooks.recording import Call, Recording, Value

BATCH_NORMS = {
    "_native_batch_norm_legit_no_training",
    "native_batch_norm",
    "cudnn_batch_norm",
    "miopen_batch_norm",
}
NHWC = (0, 2, 3, 1)  # NCHW -> NHWC
NCHW = (0, 3, 1, 2)  # NHWC -> NCHW


def circle_data(value: Value) -> np.ndarray:
    """A Value's data as the Circle model holds it: 4-D activations NHWC."""
    if value.nchw and value.data.ndim == 4:
        return value.data.transpose(NHWC)
    return value.data


def pair(value: Any, default: int = 1) -> list[int]:
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return [default, default]
    if isinstance(value, int):
        return [value, value]
    values = [int(v) for v in value]
    return values * 2 if len(values) == 1 else values


def padding_mode(
    size: tuple[int, ...], kernel: list[int], stride: list[int], dilation: list[int], pad: list[int]
) -> tuple[str, list[tuple[int, int]] | None]:
    """'VALID' for no padding; 'SAME' where PyTorch's padding is what TensorFlow's SAME pads
    (total = max((ceil(n/s) - 1) * s + (k - 1) * d + 1 - n, 0), total // 2 before); otherwise
    'VALID' after an explicit Pad of PyTorch's padding (what converters write)."""
    if not any(pad):
        return "VALID", None
    for n, k, s, d, p in zip(size, kernel, stride, dilation, pad, strict=True):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        if (total // 2, total - total // 2) != (p, p):
            return "VALID", [(p, p) for p in pad]
    return "SAME", None


def batch_norm_factors(call: Call) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) of an inference batch norm, y = x * scale + shift per channel; None for
    one that normalises with the batch's own statistics."""
    args = call.args
    if call.packet == "_native_batch_norm_legit_no_training":
        x, weight, bias, mean, var, _, eps = args[:7]
    else:
        x, weight, bias, mean, var, training, _, eps = args[:8]
        if training:
            return None
    if not isinstance(mean, Value) or not isinstance(var, Value):
        return None
    channels = x.data.shape[1]
    gamma = weight.data if isinstance(weight, Value) else np.ones(channels, np.float32)
    beta = bias.data if isinstance(bias, Value) else np.zeros(channels, np.float32)
    scale = (gamma / np.sqrt(var.data + eps)).astype(np.float32)
    return scale, (beta - mean.data * scale).astype(np.float32)


@dataclass(eq=False)
class CircleOp:
    """One operator of the presented Circle model: its inputs in Circle's order (None where
    Circle has an optional input left out), outputs, options (padding, stride, fused_act, ...)
    and the quantization parameters of some inputs (by position)."""

    opcode: str
    module: str
    inputs: list[Value | None]
    outputs: list[Value]
    options: dict[str, Any] = field(default_factory=dict)
    quantparams: dict[int, dict[str, Any]] = field(default_factory=dict)
    name: str = ""


class Builder:
    """Turns recorded calls into CircleOps; knows every consumer of every Value, so that a batch
    norm or an activation is folded or fused only into the one operator whose output it alone
    reads."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.ops: list[CircleOp] = []
        self.absorbed: set[int] = set()
        self.consumers: dict[int, list[Call]] = {}
        for call in recording.calls:
            for value in call.values():
                self.consumers.setdefault(id(value.base), []).append(call)
        self.network_outputs = {id(v.base) for v in recording.outputs}

    def only_consumer(self, value: Value, packets: set[str]) -> Call | None:
        """The call that alone reads `value` (as its first argument), if it is one of
        `packets` and `value` is no output of the network."""
        if id(value.base) in self.network_outputs:
            return None
        users = self.consumers.get(id(value.base), [])
        if len(users) != 1 or id(users[0]) in self.absorbed:
            return None
        call = users[0]
        first = call.args[0] if call.args else None
        if call.packet not in packets or not isinstance(first, Value) or first.base is not value:
            return None
        return call

    def absorb(self, call: Call) -> None:
        self.absorbed.add(id(call))

    def fuse_activation(self, value: Value) -> tuple[Value, str]:
        """The output after a ReLU, ReLU6, ReLU(-1..1) or tanh that alone reads `value`, fused
        (Circle's fused activations; Circle has no fused sigmoid), or `value` and 'none'."""
        call = self.only_consumer(
            value, {"relu", "relu_", "hardtanh", "hardtanh_", "tanh", "tanh_", "clamp"}
        )
        if call is None:
            return value, "none"
        kind = activation_kind(call)
        if kind is None:
            return value, "none"
        self.absorb(call)
        return call.outputs[0], kind

    def emit(
        self,
        opcode: str,
        module: str,
        inputs: list[Value | None],
        outputs: list[Value],
        **options: Any,
    ) -> CircleOp:
        op = CircleOp(opcode, module, inputs, outputs, options)
        self.ops.append(op)
        return op

    def pad(self, value: Value, pads: list[tuple[int, int]], fill: float, module: str) -> Value:
        """`value` (N, C, H, W) padded in H and W by an explicit Pad (PadV2 for a fill other
        than zero); the padded Value."""
        widths = [(0, 0), (0, 0), *pads]
        padded = Value(np.pad(value.data, widths, constant_values=fill))
        self.emit_pad(value, [widths[i] for i in NHWC], fill, module, [padded])
        return padded

    def emit_pad(
        self, value: Value, paddings: list[tuple[int, int]], fill: float, module: str, out: list
    ) -> None:
        """A Pad of `value` by `paddings` (one (before, after) row per axis, in the presented
        layout), a PadV2 with the fill as third input for a fill other than zero."""
        inputs: list[Value | None] = [value, const(np.array(paddings, np.int32))]
        if fill != 0:
            inputs.append(const(np.array(fill, np.float32)))
        self.emit("PadV2" if fill != 0 else "Pad", module, inputs, out)


def activation_kind(call: Call) -> str | None:
    """Circle's fused-activation string for an activation call, or None."""
    packet = call.packet.rstrip("_")
    if packet == "relu":
        return "relu"
    if packet == "tanh":
        return "tanh"
    if packet in ("hardtanh", "clamp"):
        bounds = tuple(float(b) for b in call.args[1:3] if isinstance(b, (int, float)))
        return {(0.0, 6.0): "relu6", (-1.0, 1.0): "relu_n1_to_1"}.get(bounds)
    return None


def const(data: np.ndarray, name: str | None = None) -> Value:
    """A constant written in the presented layout already."""
    return Value(np.asarray(data), is_const=True, name=name, nchw=False)


def name_ops(ops: list[CircleOp]) -> None:
    """Names `<module path>/<Opcode>#<n>` (as without --dalgona); an operator's output tensor
    has its name (`<name>:<i>` for each of several), and a constant without a name of its own
    is `<name>/<i>` after its operator and position."""
    counts: dict[str, int] = {}
    for op in ops:
        key = f"{op.module}/{op.opcode}" if op.module else op.opcode
        op.name = f"{key}#{counts.get(key, 0)}"
        counts[key] = counts.get(key, 0) + 1
        if len(op.outputs) == 1:
            op.outputs[0].name = op.name
        else:
            for index, output in enumerate(op.outputs):
                output.name = f"{op.name}:{index}"
        for index, value in enumerate(op.inputs):
            if value is not None and value.label is None:
                value.name = f"{op.name}/{index}"


# ATen operator (without a trailing `_` of its in-place form) -> Circle opcode, for the calls
# presented one to one, their tensors and numbers as inputs.
CIRCLE_OPCODES = {
    "relu": "Relu",
    "sigmoid": "Logistic",
    "tanh": "Tanh",
    "gelu": "Gelu",
    "hardswish": "HardSwish",
    "leaky_relu": "LeakyRelu",
    "elu": "Elu",
    "prelu": "PRelu",
    "_softmax": "Softmax",
    "softmax": "Softmax",
    "_log_softmax": "LogSoftmax",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "rsqrt": "Rsqrt",
    "neg": "Neg",
    "abs": "Abs",
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "div": "Div",
    "maximum": "Maximum",
    "minimum": "Minimum",
    "pow": "Pow",
    "cat": "Concatenation",
    "stack": "Pack",
    "bmm": "BatchMatMul",
    "mm": "BatchMatMul",
    "matmul": "BatchMatMul",
    "upsample_nearest2d": "ResizeNearestNeighbor",
    "upsample_bilinear2d": "ResizeBilinear",
    "reflection_pad2d": "MirrorPad",
    "_adaptive_avg_pool2d": "AveragePool2D",
    "adaptive_avg_pool2d": "AveragePool2D",
}
_BINARY = {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Pow"}


def arg(call: Call, index: int, default: Any = None) -> Any:
    return call.args[index] if len(call.args) > index else default


def operand(value: Any) -> Value:
    return value if isinstance(value, Value) else const(np.array(value, np.float32))


def simple(builder: Builder, call: Call) -> None:
    """One Circle operator: the call's tensors, and the numbers of an element-wise operator,
    as its inputs."""
    packet = call.packet.rstrip("_") if call.packet.endswith("_") else call.packet
    opcode = CIRCLE_OPCODES.get(packet)
    if opcode is None:
        kind = activation_kind(call)
        opcode = {"relu6": "Relu6", "relu_n1_to_1": "ReluN1To1"}.get(kind or "")
    if opcode is None:
        return default(builder, call)
    inputs: list[Value | None] = []
    for index, argument in enumerate(call.args):
        if isinstance(argument, Value):
            inputs.append(argument)
        elif isinstance(argument, list) and argument and isinstance(argument[0], Value):
            inputs.extend(argument)
        elif index == 1 and isinstance(argument, (int, float)) and opcode in _BINARY:
            inputs.append(operand(argument))
    op = builder.emit(opcode, call.module, inputs, call.outputs[:1])
    if opcode == "Add":
        op.options["fused_act"] = "none"


def default(builder: Builder, call: Call) -> None:
    """A call with no Circle counterpart here: the ATen name, its tensors as inputs."""
    inputs: list[Value | None] = list(call.values())
    builder.emit(call.packet, call.module, inputs, call.outputs[:1] or [])
