"""The per-layer plan: what a configuration sets on each layer, as plain data.

A plan maps a layer name to its settings: `input_bits` and `weight_bits` (the bit widths of its
input and weight quantizers) and `threshold` (its block-sparsity threshold), e.g.
`{"conv1": {"input_bits": 8, "weight_bits": 4, "threshold": 0.3}}`. It is JSON-serialisable,
stored with every individual of a result, and re-applied to a fresh model by `apply_plan`; the
bit-cost model, the energy model, the cost table, retraining and comparison all read it.

A problem's configuration is a list aligned with its variables; variables are named after what
they set: `<layer>.input_quantizer` and `<layer>.weight_quantizer` (bit widths, as the
quantizers are named in the model) and `<layer>` (a threshold). `PlanLayout` decodes a
configuration by those names, and is the only place that does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

INPUT_BITS, WEIGHT_BITS, THRESHOLD = "input_bits", "weight_bits", "threshold"
# Quantizer name suffix -> the setting it holds.
QUANTIZERS = {".input_quantizer": INPUT_BITS, ".weight_quantizer": WEIGHT_BITS}

Plan = dict[str, dict[str, Any]]


def variable_setting(name: str) -> tuple[str, str]:
    """(layer, setting) of a variable: a quantizer's bit width, or a layer's threshold."""
    for suffix, setting in QUANTIZERS.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], setting
    return name, THRESHOLD


def quantizer_name(layer: str, setting: str) -> str:
    """The name of the quantizer holding a bit-width setting of `layer`."""
    suffix = next(s for s, held in QUANTIZERS.items() if held == setting)
    return layer + suffix


class PlanLayout:
    """Decodes configurations of one list of variables into plans. The layer names are made once,
    so every plan of a result shares them (a result file stores each name once)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.settings = [variable_setting(name) for name in self.names]

    def plan(self, configuration: Sequence[Any]) -> Plan:
        if len(configuration) != len(self.settings):
            raise ValueError(
                f"a configuration of {len(configuration)} values for {len(self.settings)} variables"
            )
        plan: Plan = {}
        for (layer, setting), value in zip(self.settings, configuration, strict=True):
            plan.setdefault(layer, {})[setting] = value
        return plan


def plan_of(names: Sequence[str], configuration: Sequence[Any]) -> Plan:
    """The plan of one configuration of the variables `names`."""
    return PlanLayout(names).plan(configuration)


def apply_plan(
    plan: Mapping[str, Mapping[str, Any]], quantized: Any = None, sparse: Any = None
) -> None:
    """Put a plan into effect: bit widths on a QuantizedModel's layers, thresholds on a
    SparseModel's sparsifiers (either may be None when the plan has no such settings). Every
    setting must find its layer: a plan made for another model is refused."""
    layers = quantized.layers if quantized is not None else {}
    sparsifiers = sparse.sparsifiers if sparse is not None else {}
    for layer, settings in plan.items():
        for setting, value in settings.items():
            if setting == THRESHOLD and layer in sparsifiers:
                if value < 0:
                    raise ValueError(f"thresholds must not be negative, got {value}")
                sparsifiers[layer].threshold = float(value)
            elif setting in (INPUT_BITS, WEIGHT_BITS) and layer in layers:
                role = "input_quantizer" if setting == INPUT_BITS else "weight_quantizer"
                getattr(layers[layer], role).num_bits = int(value)
            else:
                raise ValueError(f"the plan sets {setting} of layer '{layer}', which has none")


def current_plan(quantized: Any = None, sparse: Any = None) -> Plan:
    """The plan a QuantizedModel and/or SparseModel have in effect now."""
    plan: Plan = {}
    if quantized is not None:
        for name, layer in quantized.layers.items():
            plan.setdefault(name, {}).update(
                {
                    INPUT_BITS: layer.input_quantizer.num_bits,
                    WEIGHT_BITS: layer.weight_quantizer.num_bits,
                }
            )
    if sparse is not None:
        for name, sparsifier in sparse.sparsifiers.items():
            plan.setdefault(name, {})[THRESHOLD] = sparsifier.threshold
    return plan


def layer_bits(plan: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Layer -> its bit widths (`input_bits`, `weight_bits`), for layers that have any."""
    return {
        layer: {k: int(v) for k, v in settings.items() if k in (INPUT_BITS, WEIGHT_BITS)}
        for layer, settings in plan.items()
        if INPUT_BITS in settings or WEIGHT_BITS in settings
    }
