"""Fake-quantized counterparts of convolution and linear layers: an input and a weight quantizer.

A quantized layer is built from a float layer and shares its parameters (no copy); `to_float()`
gives back a float layer over the same parameters. Names follow NVIDIA's: `input_quantizer`,
`weight_quantizer`.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from model_explorer.quantization.quantizer import TensorQuantizer, WeightQuantizer

_state = threading.local()


def inside_layer() -> bool:
    """True while a quantized layer's own forward runs: its products are quantized already,
    so code watching torch functions (quantization/functional.py) leaves them alone."""
    return getattr(_state, "depth", 0) > 0


class layer_forward:  # noqa: N801 - a context manager, like torch.no_grad
    """Marks a quantized layer's forward as running (see `inside_layer`)."""

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


def _rebuild(module: nn.Module, cls: type[nn.Module]) -> Any:
    """An instance of `cls` with `module`'s state: parameters shared, containers copied."""
    rebuilt = cls.__new__(cls)
    rebuilt.__dict__.update(
        {
            key: copy.copy(value) if isinstance(value, dict) else value
            for key, value in module.__dict__.items()
        }
    )
    return rebuilt


def place_quantizers(layer: Any) -> None:
    """Tell a layer's quantizers their block axes: the axes of the input channels that a
    layer's products sum over, where block formats (MX, NVFP4, group-wise INT) form blocks."""
    layer.input_quantizer.block_axis = layer.input_block_axis
    layer.weight_quantizer.block_axis = layer.weight_block_axis


class QuantLayer:
    """Mixin of the quantized layers; `float_type` is the layer type it replaces.
    `input_block_axis` and `weight_block_axis` are the input-channel axes of its input (N, C,
    ... for a convolution, ..., features for a linear layer) and of its weight (out, in, ... for
    a convolution, in, out, ... for a transposed one)."""

    float_type: type[nn.Module]
    input_quantizer: TensorQuantizer
    weight_quantizer: WeightQuantizer
    input_block_axis: int = -1
    weight_block_axis: int = 1

    @classmethod
    def from_float(
        cls, module: nn.Module, input_quantizer: TensorQuantizer, weight_quantizer: WeightQuantizer
    ) -> QuantLayer:
        layer = _rebuild(module, cls)
        device = module.weight.device
        layer.input_quantizer = input_quantizer.to(device)
        layer.weight_quantizer = weight_quantizer.to(device)
        place_quantizers(layer)
        return layer

    def to_float(self) -> nn.Module:
        """The float layer over the same parameters."""
        layer = _rebuild(self, self.float_type)  # type: ignore[arg-type]
        del layer._modules["input_quantizer"], layer._modules["weight_quantizer"]
        return layer

    def quantized_weight(self) -> Tensor:
        return self.weight_quantizer(self.weight)  # type: ignore[attr-defined]

    def forward(self, input: Tensor, functional: FunctionalCall | None = None) -> Tensor:
        with layer_forward():
            x, weight = self.input_quantizer(input), self.quantized_weight()
            if functional is not None:
                return functional.run(x, self.weight, weight)  # type: ignore[attr-defined]
            # A SparseModel may add a block sparsifier, which then runs the layer on quantized
            # data.
            sparsifier = self._modules.get("sparsifier")  # type: ignore[attr-defined]
            if sparsifier is not None:
                return sparsifier(self, x, weight)
            return self.dense(x, weight)

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        raise NotImplementedError


class QuantConv1d(QuantLayer, nn.Conv1d):
    float_type, input_block_axis = nn.Conv1d, -2

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return self._conv_forward(x, weight, self.bias)


class QuantConv2d(QuantLayer, nn.Conv2d):
    float_type, input_block_axis = nn.Conv2d, -3

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return self._conv_forward(x, weight, self.bias)


class QuantConv3d(QuantLayer, nn.Conv3d):
    float_type, input_block_axis = nn.Conv3d, -4

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return self._conv_forward(x, weight, self.bias)


class _QuantConvTranspose(QuantLayer):
    dims: int
    function: Any
    weight_block_axis = 0

    def forward(
        self,
        input: Tensor,
        output_size: list[int] | None = None,
        functional: FunctionalCall | None = None,
    ) -> Tensor:
        if functional is not None:
            return QuantLayer.forward(self, input, functional)
        output_padding = self._output_padding(  # type: ignore[attr-defined]
            input,
            output_size,
            self.stride,
            self.padding,
            self.kernel_size,
            self.dims,
            self.dilation,
        )
        with layer_forward():
            return self._transposed(input, output_padding)

    def _transposed(self, input: Tensor, output_padding: Any) -> Tensor:
        return type(self).function(
            self.input_quantizer(input),
            self.quantized_weight(),
            self.bias,
            self.stride,
            self.padding,
            output_padding,
            self.groups,
            self.dilation,
        )


class QuantConvTranspose1d(_QuantConvTranspose, nn.ConvTranspose1d):
    float_type, dims, function = nn.ConvTranspose1d, 1, F.conv_transpose1d
    input_block_axis = -2


class QuantConvTranspose2d(_QuantConvTranspose, nn.ConvTranspose2d):
    float_type, dims, function = nn.ConvTranspose2d, 2, F.conv_transpose2d
    input_block_axis = -3


class QuantConvTranspose3d(_QuantConvTranspose, nn.ConvTranspose3d):
    float_type, dims, function = nn.ConvTranspose3d, 3, F.conv_transpose3d
    input_block_axis = -4


class QuantLinear(QuantLayer, nn.Linear):
    float_type = nn.Linear

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.linear(x, weight, self.bias)


QUANT_LAYERS: dict[str, type[QuantLayer]] = {
    cls.float_type.__name__: cls
    for cls in (
        QuantConv1d,
        QuantConv2d,
        QuantConv3d,
        QuantConvTranspose1d,
        QuantConvTranspose2d,
        QuantConvTranspose3d,
        QuantLinear,
    )
}
