"""Layers with a forward of their own: subclasses of the quantizable types that add work around
their product (TensorFlow's SAME padding in EfficientNet-Lite's `Conv2dStaticSamePadding` and
timm's `Conv2dSame`, the weight standardisation of timm's `StdConv2d`) and then call
`F.conv2d` / `F.linear` themselves.

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

from model_explorer.quantization.layers import FunctionalCall, TransformedLayer, layer_forward


class OwnForward:
    """Mixin (first base) of a layer class made by `own_forward_class`."""

    own_type: type

    def forward(self, *args: Any, functional: FunctionalCall | None = None, **kwargs: Any) -> Any:
        if functional is not None:  # its weight used by other code (functional.py)
            return self.transformed(args[0], functional)  # type: ignore[attr-defined]
        with layer_forward():
            x = self.input_quantizer(args[0])  # type: ignore[attr-defined]
            weight = self.quantized_weight()  # type: ignore[attr-defined]
            parameters = self._parameters  # type: ignore[attr-defined]
            stored = parameters["weight"]
            parameters["weight"] = weight  # what `self.weight` reads while the forward runs
            try:
                return self.own_type.forward(self, x, *args[1:], **kwargs)
            finally:
                parameters["weight"] = stored

    def to_float(self) -> Any:
        """The module as its own class again, over the same parameters."""
        from model_explorer.modules import rebuild
        from model_explorer.quantization.layers import SLOTS

        layer = rebuild(self, self.own_type)  # type: ignore[arg-type]
        for name in SLOTS:
            del layer._modules[name]
        return layer


@cache
def own_forward_class(own_type: type, transformed: type[TransformedLayer]) -> type:
    """The transformed layer class for instances of `own_type`, a subclass of `transformed`'s
    float type with a forward of its own."""
    return type(
        f"Transformed{own_type.__name__}",
        (OwnForward, transformed, own_type),
        {"own_type": own_type, "__module__": __name__},
    )
