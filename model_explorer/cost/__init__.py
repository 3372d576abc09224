"""Cost of layers and models: multiply-accumulates, parameters, memory traffic, energy."""

from __future__ import annotations

from model_explorer.cost.analyze import CONVENTIONS, CostReport, CostRow, analyze_cost
from model_explorer.cost.layers import LayerCost, layer_macs, measure_layers

__all__ = [
    "CONVENTIONS",
    "CostReport",
    "CostRow",
    "LayerCost",
    "analyze_cost",
    "bits_from_configuration",
    "layer_macs",
    "measure_layers",
]


def bits_from_configuration(names: list[str], values: list) -> dict[str, dict[str, int]]:  # noqa: ANN001
    """Layer -> {'input': bits, 'weight': bits} from quantizer names such as
    'conv1.input_quantizer' and their values (a result individual's configuration)."""
    bits: dict[str, dict[str, int]] = {}
    for name, value in zip(names, values, strict=True):
        layer, _, quantizer = name.rpartition(".")
        if quantizer in ("input_quantizer", "weight_quantizer"):
            bits.setdefault(layer, {})[quantizer.split("_")[0]] = int(value)
    return bits
