"""Cost of layers and models: multiply-accumulates, parameters, memory traffic, energy."""

from __future__ import annotations

from model_explorer.cost.layers import LayerCost, layer_macs, measure_layers

__all__ = ["LayerCost", "layer_macs", "measure_layers"]
