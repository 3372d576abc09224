"""Cost of layers and models: multiply-accumulates, parameters, memory traffic, bit costs of a
plan, energy."""

from __future__ import annotations

from model_explorer.cost.analyze import CONVENTIONS, CostReport, CostRow, analyze_cost
from model_explorer.cost.bits import BitCostModel, weighted_bits
from model_explorer.cost.layers import LayerCost, layer_macs, measure_layers

__all__ = [
    "CONVENTIONS",
    "BitCostModel",
    "CostReport",
    "CostRow",
    "LayerCost",
    "analyze_cost",
    "layer_macs",
    "measure_layers",
    "weighted_bits",
]
