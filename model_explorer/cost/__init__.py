"""Cost of layers and models: multiply-accumulates, parameters, memory traffic, bit costs of a
plan, energy. Its public names load their modules on first use (scientific Python's lazy
loading, SPEC 1), so that the settings in cost/energy/spec.py import no torch."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "analyze": ["CONVENTIONS", "CostReport", "CostRow", "analyze_cost"],
        "bits": ["BitCostModel", "weighted_bits"],
        "layers": ["LayerCost", "layer_macs", "measure_layers"],
    },
)
