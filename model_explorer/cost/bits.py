"""The bit-cost model: what a plan's bit widths cost, from the sizes of the quantized layers.

A quantizer's bits are bits per element: its bit width for the integer format, and for another
format of the format registry (`input_format` / `weight_format` in the plan) its bits per element
with the scales counted (MXFP4 4.25, NVFP4 4.5, `int4_g128` 4.125; FP8 8, its one scale per
tensor or channel not counted, as an integer quantizer's is not).

- weighted bits (the original tool's cost): `bits_weighted_linear` sums every quantizer's bits;
  `bits_weighted_per_layer` weighs input quantizers' bits by 5.0 and weight quantizers' by 0.5;
- model size in bits: weight bits x weight elements, summed over the quantized layers;
- BOPs per sample: MACs x input bits x weight bits, summed. For float and block formats this is
  the same product of bits per element (a multiply of an FP8 input with an MXFP4 weight counts
  8 x 4.25 bit operations): a hardware-neutral measure of the work, not of any unit's cost;
- effective BOPs: each layer's BOPs times the share of its input blocks that are not zero.

Problems, the Compression inspector and reports use this one model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from model_explorer.cost.layers import LayerCost, measure_layers
from model_explorer.formats import format_bits
from model_explorer.plan import FORMAT_OF, INPUT_BITS, WEIGHT_BITS

# Weighting function -> (factor of an input quantizer's bits, factor of a weight quantizer's).
WEIGHTINGS = {"bits_weighted_linear": (1, 1), "bits_weighted_per_layer": (5.0, 0.5)}

Plan = Mapping[str, Mapping[str, Any]]


def element_bits(settings: Mapping[str, Any], setting: str) -> float | None:
    """Bits per element of one quantizer of a layer's plan settings (`setting`: INPUT_BITS or
    WEIGHT_BITS), whether it holds a bit width or a format; None when it holds neither."""
    if FORMAT_OF[setting] in settings:
        return format_bits(settings[FORMAT_OF[setting]])
    return settings.get(setting)


def weighted_bits(plan: Plan, function: str = "bits_weighted_linear") -> float:
    """The original tool's cost of the plan's bit widths (see the module docstring)."""
    if function not in WEIGHTINGS:
        raise ValueError(f"unknown bit weighting function {function!r}")
    input_factor, weight_factor = WEIGHTINGS[function]
    total: float = 0
    for settings in plan.values():
        for setting, factor in ((INPUT_BITS, input_factor), (WEIGHT_BITS, weight_factor)):
            bits = element_bits(settings, setting)
            if bits is not None:
                total += factor * bits
    return float(total)


class BitCostModel:
    """Costs of plans for a model's quantized layers; `measure` makes one from a model.

    Args:
        layers: each quantized layer's LayerCost (MACs, weight elements per sample), by name,
            in model order.
    """

    def __init__(self, layers: Mapping[str, LayerCost]) -> None:
        self.layers = dict(layers)

    @classmethod
    def measure(cls, model: nn.Module, example: Any, layers: Mapping[str, nn.Module]):  # noqa: ANN206
        """Measure the named layers' sizes on one forward pass of `example`."""
        costs = measure_layers(model, example, dict(layers))
        return cls({name: costs[name] for name in layers if name in costs})

    @property
    def macs(self) -> int:
        """Multiply-accumulates of one forward over every costed layer."""
        return sum(cost.macs for cost in self.layers.values())

    @property
    def weight_elements(self) -> int:
        """Weight elements over every costed layer."""
        return sum(cost.weight_elements for cost in self.layers.values())

    def _bits(self, plan: Plan, name: str) -> tuple[float, float]:
        settings = plan[name]
        return element_bits(settings, INPUT_BITS), element_bits(settings, WEIGHT_BITS)  # type: ignore[return-value]

    def model_size(self, plan: Plan) -> float:
        """Weight bits x weight elements over the quantized layers, in bits."""
        return float(
            sum(self._bits(plan, n)[1] * c.weight_elements for n, c in self.layers.items())
        )

    def bops(self, plan: Plan) -> float:
        """MACs x input bits x weight bits per sample, over the quantized layers."""
        total = 0
        for name, cost in self.layers.items():
            input_bits, weight_bits = self._bits(plan, name)
            total += cost.macs * input_bits * weight_bits
        return float(total)

    def effective_bops(self, plan: Plan, kept: Mapping[str, float]) -> float:
        """BOPs with each layer's scaled by `kept[layer]`, the share of its input blocks that
        are not zero (1 for layers not in `kept`)."""
        total = 0.0
        for name, cost in self.layers.items():
            input_bits, weight_bits = self._bits(plan, name)
            total += cost.macs * input_bits * weight_bits * kept.get(name, 1.0)
        return total
