"""Recorded ATen calls that move data between layouts, as Circle operators (`analyze
--dalgona`): reductions, reshapes, transposes, splits and pads, their axes and shapes those of
the NHWC tensors presented. Which calls reshape or transpose is the tracer's opcode
(model_explorer.tracing.operators: Reshape, Transpose)."""

from __future__ import annotations

import numpy as np

from model_explorer.analysis.hooks.circle import NCHW, NHWC, Builder, arg, const, simple
from model_explorer.analysis.hooks.recording import Call, Value


def _circle_axes(axes: list[int], rank: int) -> list[int]:
    """PyTorch axes of a 4-D tensor as axes of its NHWC form."""
    axes = [a % rank for a in axes]
    return [NHWC.index(a) for a in axes] if rank == 4 else axes


def _reduce(builder: Builder, call: Call) -> None:
    x = call.args[0]
    rank = x.data.ndim
    if call.packet in ("_adaptive_avg_pool2d", "adaptive_avg_pool2d"):
        if list(call.outputs[0].data.shape[2:]) != [1, 1]:
            return simple(builder, call)
        axes = [2, 3]
    else:
        dims = arg(call, 1)
        axes = list(range(rank)) if not dims else [int(d) for d in dims]
    opcode = {"sum": "Sum", "amax": "ReduceMax"}.get(call.packet, "Mean")
    axis = const(np.array(_circle_axes(axes, rank), np.int32))
    builder.emit(opcode, call.module, [x, axis], call.outputs[:1])


def _reshape(builder: Builder, call: Call) -> None:
    """Reshape; a 4-D tensor with more than one position is transposed to PyTorch's order
    first (and back after), so that the elements keep PyTorch's order."""
    x, out = call.args[0], call.outputs[0]
    if x.data.ndim == 4 and x.nchw and x.data.shape[2] * x.data.shape[3] > 1:
        plain = Value(x.data, nchw=False)
        builder.emit("Transpose", call.module, [x, const(np.array(NCHW, np.int32))], [plain])
        x = plain
    spread = out.data.ndim == 4 and out.data.shape[2] * out.data.shape[3] > 1
    result = Value(out.data, nchw=False) if spread else out
    shape = const(np.array(result.data.shape, np.int32))
    builder.emit("Reshape", call.module, [x, shape], [result])
    if spread:
        builder.emit("Transpose", call.module, [result, const(np.array(NHWC, np.int32))], [out])


def _transpose(builder: Builder, call: Call) -> None:
    x, out = call.args[0], call.outputs[0]
    rank = x.data.ndim
    if call.packet == "t":
        perm = [1, 0] if rank == 2 else [0]
    elif call.packet == "transpose":
        perm = list(range(rank))
        a, b = int(call.args[1]) % rank, int(call.args[2]) % rank
        perm[a], perm[b] = perm[b], perm[a]
    else:
        perm = [int(p) % rank for p in call.args[1]]
    into = list(NHWC) if rank == 4 and x.nchw else list(range(rank))
    out_axes = list(NHWC) if rank == 4 and out.nchw else list(range(rank))
    circle = [into.index(perm[axis]) for axis in out_axes]
    builder.emit("Transpose", call.module, [x, const(np.array(circle, np.int32))], [out])


def _split(builder: Builder, call: Call) -> None:
    """Split (equal parts: inputs split_dim, input) or SplitV (input, sizes, split_dim)."""
    x = call.args[0]
    dim = int(arg(call, 2, 0)) % x.data.ndim
    axis = const(np.array(_circle_axes([dim], x.data.ndim)[0], np.int32))
    sizes = [o.data.shape[dim] for o in call.outputs]
    if len(set(sizes)) == 1:
        op = builder.emit("Split", call.module, [axis, x], call.outputs)
    else:
        parts = const(np.array(sizes, np.int32))
        op = builder.emit("SplitV", call.module, [x, parts, axis], call.outputs)
    op.options["num_split"] = len(call.outputs)


def _pad(builder: Builder, call: Call) -> None:
    x, widths = call.args[0], [int(w) for w in call.args[1]]
    fill = float(arg(call, 2, 0.0) or 0.0)
    rank = x.data.ndim
    pads = [(0, 0)] * rank
    for index in range(len(widths) // 2):
        pads[rank - 1 - index] = (widths[2 * index], widths[2 * index + 1])
    order = list(NHWC) if rank == 4 and x.nchw else list(range(rank))
    builder.emit_pad(x, [pads[i] for i in order], fill, call.module, call.outputs[:1])


LAYOUT_CONVERTERS = {
    **dict.fromkeys(
        ("mean", "sum", "amax", "_adaptive_avg_pool2d", "adaptive_avg_pool2d"), _reduce
    ),
    "Reshape": _reshape,  # by the tracer's opcode; the others by ATen packet
    "Transpose": _transpose,
    **dict.fromkeys(("split", "split_with_sizes", "chunk"), _split),
    "constant_pad_nd": _pad,
}
