"""Per-layer sizes of convolution and linear layers (and of quantized products of two
activations, which have no weight), measured on one example batch and divided by its samples:
multiply-accumulates, weight elements, input and output elements (all per sample). A layer's
calls are counted whole, so a layer that sees more rows than samples (Swin's attention over
windows folded into the batch dimension) is counted in full."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.modules import module_hooks, run_on, sample_count

_CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_TRANSPOSED = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
# Layers that multiply their input with a weight: what MACs, quantization and energy are about.
WEIGHT_LAYERS = (*_CONVOLUTIONS, *_TRANSPOSED, nn.Linear)


@dataclass(frozen=True)
class LayerCost:
    macs: int
    weight_elements: int
    input_elements: int
    output_elements: int


def layer_macs(module: nn.Module, input: Tensor, output: Tensor) -> int:
    """Multiply-accumulates of one call, over its whole input (the convention of torchinfo and
    calflops: every product of a weight and an input counts once; bias additions do not)."""
    if isinstance(module, _CONVOLUTIONS):
        kernel = module.in_channels // module.groups * math.prod(module.kernel_size)
        return output.numel() * kernel
    if isinstance(module, _TRANSPOSED):
        kernel = module.out_channels // module.groups * math.prod(module.kernel_size)
        return input.numel() * kernel
    if isinstance(module, nn.Linear):
        return output.numel() * module.in_features
    raise TypeError(f"no MAC rule for {type(module).__name__}")


def recurrent_macs(module: nn.RNNBase, input: Any) -> int:
    """Multiply-accumulates of one call of a recurrent layer (nn.RNN, nn.GRU, nn.LSTM) over
    its whole input: per time step and sample, each layer and direction multiplies its input
    and its previous hidden state by every gate's weights (4 gates for an LSTM, 3 for a GRU,
    1 for an RNN), and an LSTM with `proj_size` its hidden state by the projection."""
    from torch.nn.utils.rnn import PackedSequence

    data = input.data if isinstance(input, PackedSequence) else input
    steps = data.numel() // module.input_size  # time steps times samples
    gates = {"LSTM": 4, "GRU": 3}.get(module.mode, 1)
    hidden = module.hidden_size
    state = module.proj_size or hidden
    directions = 2 if module.bidirectional else 1
    per_step = 0
    for layer in range(module.num_layers):
        width = module.input_size if layer == 0 else state * directions
        per_step += directions * (gates * hidden * (width + state) + hidden * module.proj_size)
    return steps * per_step


def measure_layers(
    model: nn.Module, example: Any, layers: dict[str, nn.Module]
) -> dict[str, LayerCost]:
    """Run `model` once on `example` and record each named layer's cost per sample. Layers
    called more than once add up.

    Args:
        model: the model to run (float, or a QuantizedModel).
        example: one batch of inputs; costs are divided by its samples.
        layers: the layers to measure, by name (e.g. a QuantizedModel's `layers`).
    """
    found: dict[str, LayerCost] = {}
    samples = max(1, sample_count(example))

    def per_sample(count: int) -> int:
        return round(count / samples)

    def record(name: str, module: nn.Module, args: tuple, output: Tensor) -> None:
        product = getattr(module, "product_macs", None)  # a product of two activations
        weight = getattr(module, "weight", None)
        macs = product(args, output) if product else layer_macs(module, args[0], output)
        cost = LayerCost(
            macs=per_sample(macs),
            weight_elements=0 if weight is None else weight.numel(),
            input_elements=per_sample(args[0].numel()),
            output_elements=per_sample(output.numel()),
        )
        previous = found.get(name)
        if previous is not None:
            cost = LayerCost(
                previous.macs + cost.macs,
                cost.weight_elements,
                previous.input_elements + cost.input_elements,
                previous.output_elements + cost.output_elements,
            )
        found[name] = cost

    with module_hooks(model, after=record, modules=layers.items()), torch.no_grad():
        run_on(model, example)
    return found
