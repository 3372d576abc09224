"""Quantizers on the operands of residual additions and average poolings.

A runtime runs a product as an integer kernel only where its output is quantized; in a
residual network the convolution before an addition (`out += identity`) and the shortcut's
convolution are read by the addition, and a product before an average pooling by the pooling,
so nothing quantizes what they produce. With `quantization.operand_quantizers`, each operand of
an addition of two activations of one shape and the input of an average pooling (the modules
and their functional forms) gets a quantizer, where what the operator produces reaches a
quantized layer. They are not layers (no weight, no gene): they take the input quantizers'
settings and are calibrated with them.

The Interceptor (functional.py) finds them on its discovery pass, as it finds products of
activations: it answers the calls with quantized operands, named `<scope>.add_<n>` and
`<scope>.avg_pool_<n>` by the module whose code runs them and their order there; `Reach`
follows, on that pass, which of them feed a quantized layer, and the others are dropped.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten

from model_explorer.quantization.quantizer import TensorQuantizer

ADDITIONS = {
    torch.add,
    Tensor.add,
    Tensor.__add__,
    Tensor.__radd__,
    Tensor.__iadd__,
    Tensor.add_,
}
AVERAGE_POOLINGS = {
    F.avg_pool1d,
    F.avg_pool2d,
    F.avg_pool3d,
    F.adaptive_avg_pool1d,
    F.adaptive_avg_pool2d,
    F.adaptive_avg_pool3d,
}
# kind -> how many leading arguments are its operands
OPERANDS = {"add": 2, "avg_pool": 1}


def _activation(value: Any) -> bool:
    """A floating-point tensor that is neither a parameter nor a view of one."""
    if not isinstance(value, Tensor) or not value.is_floating_point():
        return False
    return not isinstance(value, nn.Parameter) and not isinstance(value._base, nn.Parameter)


def operand_kind(func: Any, args: tuple) -> str | None:
    """ "add" for an addition of two activations of one shape (a residual addition, not a
    bias, a constant or a broadcast mask), "avg_pool" for an average pooling, else None."""
    if func in ADDITIONS and len(args) >= 2:
        left, right = args[0], args[1]
        if _activation(left) and _activation(right) and left.shape == right.shape:
            return "add"
    elif func in AVERAGE_POOLINGS and args and _activation(args[0]):
        return "avg_pool"
    return None


class OperandQuantizers(nn.Module):
    """The quantizers of one addition's operands (`operand_0`, `operand_1`) or one average
    pooling's input (`operand_0`). Never called itself: `call` runs each quantizer as a module
    of its own (an Opaque one, so the operator keeps its float model's name in a trace) and
    then the operator."""

    def __init__(self, quantizers: list[TensorQuantizer]) -> None:
        super().__init__()
        for index, quantizer in enumerate(quantizers):
            self.add_module(f"operand_{index}", quantizer)

    @property
    def quantizers(self) -> list[TensorQuantizer]:
        return list(self.children())  # type: ignore[arg-type]

    def call(self, func: Any, args: tuple, kwargs: dict) -> Any:
        quantizers = self.quantizers
        operands = [q(a) for q, a in zip(quantizers, args, strict=False)]
        rest = args[len(quantizers) :]
        if func is Tensor.add_:  # in place: the caller may read its first operand afterwards
            return args[0].copy_(torch.add(*operands, *rest, **kwargs))
        if func is Tensor.__iadd__:  # `a += b` rebinds `a` to what this returns
            return torch.add(*operands, *rest, **kwargs)
        return func(*operands, *rest, **kwargs)


class Reach:
    """Which operand sites feed a quantized layer, followed over one discovery pass: the
    outputs of a site are tagged with its key, every call's outputs with the tags of its
    inputs, and a layer's inputs' tags are the sites that reach it. Tags hold no tensor alive
    (a discovery pass may be a calibration batch)."""

    def __init__(self) -> None:
        self.tags: dict[int, tuple[weakref.ref, frozenset]] = {}
        self.reached: set = set()

    def of(self, values: Any) -> frozenset:
        found: frozenset = frozenset()
        for value in tree_flatten(values)[0]:
            entry = self.tags.get(id(value)) if isinstance(value, Tensor) else None
            if entry is not None and entry[0]() is value:
                found = found | entry[1]
        return found

    def tag(self, values: Any, keys: frozenset) -> None:
        if not keys:
            return
        for value in tree_flatten(values)[0]:
            if isinstance(value, Tensor):
                self.tags[id(value)] = (weakref.ref(value), keys | self.of(value))

    def arrive(self, values: Any) -> None:
        """`values` are read by a quantized layer."""
        self.reached |= self.of(values)
