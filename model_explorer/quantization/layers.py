"""Transformed layers: convolution and linear layers whose input and weight go through
transforms before the product, `sparsifier(layer, input_quantizer(x), weight_quantizer(w))`.

Each slot always holds a module: the quantizers are fake quantizers or pass-throughs (a layer a
QuantizedModel did not quantize), the sparsifier a BlockSparsifier or the dense product (a layer
a SparseModel did not sparsify), so that forward never asks what is attached. QuantizedModel
and SparseModel attach and take off their transforms with the layer's `set_quantizers` and
`set_sparsifier`, on a layer either of them swapped in. The defaults are `Inline`: no hook sees
them, so the tracer names a layer's operators as the float layer's. A transformed layer is built
from a float layer and shares its parameters (no copy); `to_float()` gives back a float layer
over the same parameters. Names follow NVIDIA's: `input_quantizer`, `weight_quantizer`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from model_explorer.modules import Inline, rebuild

_state = threading.local()
SLOTS = ("input_quantizer", "weight_quantizer", "sparsifier")


def inside_layer() -> bool:
    """True while a transformed layer's own forward runs: its products are quantized already,
    so code watching torch functions (quantization/functional.py) leaves them alone."""
    return getattr(_state, "depth", 0) > 0


class layer_forward:  # noqa: N801 - a context manager, like torch.no_grad
    """Marks a transformed layer's forward as running (see `inside_layer`)."""

    def __enter__(self) -> None:
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _state.depth -= 1


@dataclass
class FunctionalCall:
    """A call such as `F.linear(x, layer.weight[rows], bias)` made by other code with a quantized
    layer's weight (or a view of it): run with the layer's quantized input and weight."""

    function: Any
    weight: Tensor
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def run(self, x: Tensor, full_weight: Tensor, quantized: Tensor) -> Tensor:
        weight = quantized
        if self.weight is not full_weight:  # the same view of the quantized weight
            offset = self.weight.storage_offset() - full_weight.storage_offset()
            weight = quantized.as_strided(self.weight.size(), self.weight.stride(), offset)
        return self.function(x, weight, *self.args, **self.kwargs)


class PassThrough(Inline, nn.Identity):
    """The quantizer slot of a layer that is not quantized: the tensor as it is."""


class Dense(Inline, nn.Module):
    """The sparsifier slot of a layer that is not sparse: the layer's own dense product."""

    def forward(self, layer: TransformedLayer, x: Tensor, weight: Tensor, *args: Any) -> Tensor:
        return layer.dense(x, weight, *args)


def place_quantizers(layer: Any) -> None:
    """Tell a layer's quantizers their block axes: the axes of the input channels that a
    layer's products sum over, where block formats (MX, NVFP4, group-wise INT) form blocks."""
    layer.input_quantizer.block_axis = layer.input_block_axis
    layer.weight_quantizer.block_axis = layer.weight_block_axis


class TransformedLayer:
    """Mixin of the transformed layers: forward computes `sparsifier(self, input_quantizer(x),
    weight_quantizer(weight))`, the slots filled by `set_quantizers` and `set_sparsifier` (see
    the module docstring). `float_type` is the layer type it replaces. `input_block_axis` and
    `weight_block_axis` are the input-channel axes of its input (N, C, ... for a convolution,
    ..., features for a linear layer) and of its weight (out, in, ... for a convolution, in,
    out, ... for a transposed one)."""

    float_type: type[nn.Module]
    input_quantizer: nn.Module
    weight_quantizer: nn.Module
    sparsifier: nn.Module
    input_block_axis: int = -1
    weight_block_axis: int = 1

    @classmethod
    def from_float(
        cls,
        module: nn.Module,
        input_quantizer: nn.Module | None = None,
        weight_quantizer: nn.Module | None = None,
    ) -> Any:
        """The transformed counterpart of `module`, sharing its parameters: quantized with the
        quantizers given (a pass-through for None), dense."""
        layer = rebuild(module, cls)
        layer.set_quantizers(input_quantizer, weight_quantizer)
        layer.set_sparsifier(None)
        return layer

    def set_quantizers(
        self, input_quantizer: nn.Module | None = None, weight_quantizer: nn.Module | None = None
    ) -> None:
        """Quantize the input and the weight with these quantizers (moved to the weight's
        device); None passes the tensor through."""
        device = self.weight.device  # type: ignore[attr-defined]
        self.input_quantizer = _slot(input_quantizer, device, self.input_block_axis)
        self.weight_quantizer = _slot(weight_quantizer, device, self.weight_block_axis)

    def set_sparsifier(self, sparsifier: nn.Module | None = None) -> None:
        """Compute the product with `sparsifier` (a BlockSparsifier, called as
        `sparsifier(layer, x, weight)`); None computes it dense."""
        self.sparsifier = Dense() if sparsifier is None else sparsifier

    @property
    def transforms(self) -> dict[str, nn.Module]:
        """The transforms attached, by slot: the pass-through and dense defaults left out."""
        slots = {name: self._modules[name] for name in SLOTS}  # type: ignore[attr-defined]
        return {name: module for name, module in slots.items() if not isinstance(module, Inline)}

    def to_float(self) -> nn.Module:
        """The float layer over the same parameters: of its float type, or of the module's own
        class where it runs its own forward (own_forward.py)."""
        layer = rebuild(self, getattr(self, "own_type", self.float_type))  # type: ignore[arg-type]
        for name in SLOTS:
            del layer._modules[name]
        return layer

    def quantized_weight(self) -> Tensor:
        return self.weight_quantizer(self.weight)  # type: ignore[attr-defined]

    def forward(self, input: Tensor, functional: FunctionalCall | None = None) -> Tensor:
        return self.transformed(input, functional)

    def transformed(
        self, input: Tensor, functional: FunctionalCall | None = None, *args: Any
    ) -> Tensor:
        """The product of the transformed operands (`args` go to the product: a transposed
        convolution's output padding); a FunctionalCall runs in place of the product."""
        with layer_forward():
            x, weight = self.input_quantizer(input), self.quantized_weight()
            if functional is not None:
                return functional.run(x, self.weight, weight)  # type: ignore[attr-defined]
            if type(self.sparsifier) is Dense:  # no hook sees it (Inline): spare its call
                return self.dense(x, weight, *args)
            return self.sparsifier(self, x, weight, *args)

    def dense(self, x: Tensor, weight: Tensor, *args: Any) -> Tensor:
        raise NotImplementedError


def _slot(quantizer: nn.Module | None, device: Any, block_axis: int) -> nn.Module:
    """A quantizer slot's module: the quantizer on `device`, told its block axis (see
    `place_quantizers`), or a pass-through."""
    if quantizer is None:
        return PassThrough()
    quantizer = quantizer.to(device)
    quantizer.block_axis = block_axis
    return quantizer


class TransformedConv1d(TransformedLayer, nn.Conv1d):
    float_type, input_block_axis = nn.Conv1d, -2

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return self._conv_forward(x, weight, self.bias)


class TransformedConv2d(TransformedLayer, nn.Conv2d):
    float_type, input_block_axis = nn.Conv2d, -3

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return self._conv_forward(x, weight, self.bias)


class TransformedConv3d(TransformedLayer, nn.Conv3d):
    float_type, input_block_axis = nn.Conv3d, -4

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return self._conv_forward(x, weight, self.bias)


class _TransformedConvTranspose(TransformedLayer):
    dims: int
    function: Any
    weight_block_axis = 0

    def forward(
        self,
        input: Tensor,
        output_size: list[int] | None = None,
        functional: FunctionalCall | None = None,
    ) -> Tensor:
        output_padding = self._output_padding(  # type: ignore[attr-defined]
            input,
            output_size,
            self.stride,
            self.padding,
            self.kernel_size,
            self.dims,
            self.dilation,
        )
        return self.transformed(input, functional, output_padding)

    def dense(self, x: Tensor, weight: Tensor, output_padding: Any) -> Tensor:
        return type(self).function(
            x,
            weight,
            self.bias,
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
        )


class TransformedConvTranspose1d(_TransformedConvTranspose, nn.ConvTranspose1d):
    float_type, dims, function = nn.ConvTranspose1d, 1, F.conv_transpose1d
    input_block_axis = -2


class TransformedConvTranspose2d(_TransformedConvTranspose, nn.ConvTranspose2d):
    float_type, dims, function = nn.ConvTranspose2d, 2, F.conv_transpose2d
    input_block_axis = -3


class TransformedConvTranspose3d(_TransformedConvTranspose, nn.ConvTranspose3d):
    float_type, dims, function = nn.ConvTranspose3d, 3, F.conv_transpose3d
    input_block_axis = -4


class TransformedLinear(TransformedLayer, nn.Linear):
    float_type = nn.Linear

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.linear(x, weight, self.bias)


TRANSFORMED_LAYERS: dict[str, type[TransformedLayer]] = {
    cls.float_type.__name__: cls
    for cls in (
        TransformedConv1d,
        TransformedConv2d,
        TransformedConv3d,
        TransformedConvTranspose1d,
        TransformedConvTranspose2d,
        TransformedConvTranspose3d,
        TransformedLinear,
    )
}
