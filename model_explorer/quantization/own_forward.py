"""Layers with a forward of their own: subclasses of the quantizable types that add work around
their product (TensorFlow's SAME padding in EfficientNet-Lite's `Conv2dStaticSamePadding` and
timm's `Conv2dSame`, the weight standardisation of timm's `StdConv2d`) and then call
`F.conv2d` / `F.linear` themselves; and Linear-like modules of other libraries, which are no
nn.Linear but compute one with a 2-D weight of their own (transformers' `Conv1D`: x @ W + b,
W stored (in, out)), found by what their forward computes (`linear_layout`).

Swapping such a layer for the plain transformed layer would drop what its forward adds; leaving
it alone would leave it in float. Instead it becomes an instance of a class made for it,
`own_forward_class(type(module), transformed)`: a transformed layer of its base type (export,
costs and calibration treat it as that type) whose forward is the module's own, run on the
quantized input with the quantized weight in place of its weight parameter. So the layer
computes exactly what its own forward computes with quantized operands, whatever it does around
the product.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.quantization.layers import FunctionalCall, TransformedLayer, layer_forward
from model_explorer.tracing import Consumer, OperatorCall, Tracer


class OwnForward:
    """Mixin (first base) of a layer class made by `own_forward_class`; `weight_name` is the
    parameter the quantized weight stands in for while the forward runs."""

    own_type: type
    weight_name = "weight"

    def forward(self, *args: Any, functional: FunctionalCall | None = None, **kwargs: Any) -> Any:
        if functional is not None:  # its weight used by other code (functional.py)
            return self.transformed(args[0], functional)  # type: ignore[attr-defined]
        with layer_forward():
            x = self.input_quantizer(args[0])  # type: ignore[attr-defined]
            weight = self.quantized_weight()  # type: ignore[attr-defined]
            parameters = self._parameters  # type: ignore[attr-defined]
            name = self.weight_name
            stored = parameters[name]
            parameters[name] = weight  # what the forward reads as its weight while it runs
            try:
                return self.own_type.forward(self, x, *args[1:], **kwargs)
            finally:
                parameters[name] = stored


@cache
def own_forward_class(own_type: type, transformed: type[TransformedLayer]) -> type:
    """The transformed layer class for instances of `own_type`, a subclass of `transformed`'s
    float type with a forward of its own."""
    return type(
        f"Transformed{own_type.__name__}",
        (OwnForward, transformed, own_type),
        {"own_type": own_type, "__module__": __name__},
    )


_PRODUCTS = ("mm", "addmm", "matmul", "bmm")
_FLIPS = ("t", "transpose", "permute")


class _Products(Consumer):
    """Records how a product (mm, addmm, matmul) reads `weight`: as stored (in, out) or
    transposed (out, in), following its views back to it as the tracer does."""

    def __init__(self, weight: Tensor) -> None:
        self.weight = weight
        self.found: set[bool] = set()  # transposed?

    def after(self, call: OperatorCall) -> None:
        if call.packet not in _PRODUCTS:
            return
        operands = [a for a in call.args if isinstance(a, Tensor)][-2:]
        if len(operands) == 2 and self.tracer.base(operands[1]) is self.weight:
            self.found.add(self._transposed(operands[1]))

    def _transposed(self, tensor: Tensor) -> bool:
        flipped = False
        while (viewed := self.tracer.view_of(tensor)) is not None:
            tensor, packet = viewed
            flipped ^= packet in _FLIPS
        return flipped


def linear_layout(module: nn.Module) -> tuple[str, str] | None:
    """Which 2-D parameter of its own a module that is no quantizable type multiplies its input
    by, and how, found by running its forward on one sample of zeros: (name, "in_out") where a
    product reads the parameter as stored (transformers' Conv1D: x @ W), (name, "out_in") where
    transposed (what F.linear does); `weight` is tried first, then the others in order. None
    where no product reads one (an embedding), the forward takes no such input, or it gives
    something else than one tensor back (a recurrent layer: its output and hidden state, from
    products of several weights, which no one weight quantizer stands for)."""
    if isinstance(module, nn.RNNBase):
        return None
    candidates = sorted(
        (
            (name, parameter)
            for name, parameter in module._parameters.items()
            if isinstance(parameter, nn.Parameter) and parameter.dim() == 2
        ),
        key=lambda item: item[0] != "weight",
    )
    for name, weight in candidates:
        for features, layout in ((weight.shape[0], "in_out"), (weight.shape[1], "out_in")):
            probe = _Products(weight)
            zeros = torch.zeros(1, features, dtype=weight.dtype)
            tracer = Tracer(module, [probe])
            try:
                with tracer.watching():
                    output = tracer.during(lambda z=zeros: type(module).forward(module, z))
            except Exception:  # noqa: BLE001, S112 - a forward that takes no such input
                continue
            if not isinstance(output, Tensor):
                return None
            if probe.found == {layout == "out_in"}:
                return name, layout
    return None


class LinearLike(OwnForward):
    """Mixin of the layer class of a Linear-like module (a TransformedLinear running the
    module's own forward). `stored` is its weight's layout: "in_out" (transformers' Conv1D)
    puts the output channels along axis 1, where a per-channel weight quantizer then reads its
    amax, and the input channels (blocks) along axis 0."""

    stored = "out_in"

    @classmethod
    def from_float(cls, module: nn.Module, *quantizers: Any) -> Any:
        layer = super().from_float(module, *quantizers)  # type: ignore[misc]
        rows, columns = module._parameters[cls.weight_name].shape  # type: ignore[union-attr]
        transposed = cls.stored == "in_out"
        layer.in_features, layer.out_features = (rows, columns) if transposed else (columns, rows)
        if transposed and getattr(layer.weight_quantizer, "axis", None) == 0:
            layer.weight_quantizer.axis = 1  # per output channel
        return layer


@cache
def linear_like_class(own_type: type, weight_name: str, layout: str) -> type:
    """The transformed layer class for a Linear-like `own_type` whose parameter `weight_name`
    is its weight (see `linear_layout`); under another name than `weight`, `weight` reads it."""
    from model_explorer.quantization.layers import TransformedLinear

    namespace: dict[str, Any] = {
        "own_type": own_type,
        "stored": layout,
        "weight_name": weight_name,
        "weight_block_axis": 0 if layout == "in_out" else 1,
        "__module__": __name__,
    }
    if weight_name != "weight":
        namespace["weight"] = property(lambda self: self._parameters[weight_name])
    return type(
        f"Transformed{own_type.__name__}", (LinearLike, TransformedLinear, own_type), namespace
    )
