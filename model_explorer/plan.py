"""The per-layer plan: what a configuration sets on each layer, as plain data.

A plan maps a layer name to its settings: what its input and its weight go through before the
layer computes (each either `input_bits` / `weight_bits`, a bit width of the integer format, or
`input_format` / `weight_format`, a format of the format registry by its short name such as
`mxfp4`), and `threshold` (its input's block-sparsity threshold), e.g.
`{"conv1": {"input_bits": 8, "weight_format": "nvfp4", "threshold": 0.3}}`. It is JSON-serialisable,
stored with every individual of a result, and re-applied to a fresh model by `apply_plan`; the
bit-cost model, the energy model, the cost table, retraining and comparison all read it.

A problem's configuration is a list aligned with its variables; variables are named after what
they set: `<layer>.input_quantizer` and `<layer>.weight_quantizer` (a bit width, or a format's
short name where the search chooses among formats; as the quantizers are named in the model) and
`<layer>` (a threshold). `PlanLayout` decodes a configuration by those names, and is the only
place that does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from model_explorer.formats import integer_format

INPUT_BITS, WEIGHT_BITS, THRESHOLD = "input_bits", "weight_bits", "threshold"
INPUT_FORMAT, WEIGHT_FORMAT = "input_format", "weight_format"
# Quantizer name suffix -> the setting it holds.
QUANTIZERS = {".input_quantizer": INPUT_BITS, ".weight_quantizer": WEIGHT_BITS}
# A bit-width setting -> the setting of the same quantizer when it holds a format.
FORMAT_OF = {INPUT_BITS: INPUT_FORMAT, WEIGHT_BITS: WEIGHT_FORMAT}
ROLES = {INPUT_BITS: "input_quantizer", WEIGHT_BITS: "weight_quantizer"}
ROLES.update({FORMAT_OF[bits]: role for bits, role in ROLES.items()})

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
            if isinstance(value, str) and setting in FORMAT_OF:
                setting = FORMAT_OF[setting]  # a format chosen by name, not a bit width
            plan.setdefault(layer, {})[setting] = value
        return plan


def plan_of(names: Sequence[str], configuration: Sequence[Any]) -> Plan:
    """The plan of one configuration of the variables `names`."""
    return PlanLayout(names).plan(configuration)


def apply_plan(
    plan: Mapping[str, Mapping[str, Any]], quantized: Any = None, sparse: Any = None
) -> None:
    """Put a plan into effect: bit widths and formats on a QuantizedModel's quantizers,
    thresholds on a SparseModel's sparsifiers (either may be None when the plan has no such
    settings). Every setting must find its layer: a plan made for another model is refused."""
    layers = quantized.layers if quantized is not None else {}
    sparsifiers = sparse.sparsifiers if sparse is not None else {}
    for layer, settings in plan.items():
        for setting, value in settings.items():
            if setting == THRESHOLD and layer in sparsifiers:
                if value < 0:
                    raise ValueError(f"thresholds must not be negative, got {value}")
                sparsifiers[layer].threshold = float(value)
            elif setting in (INPUT_BITS, WEIGHT_BITS) and layer in layers:
                getattr(layers[layer], ROLES[setting]).num_bits = int(value)
            elif setting in (INPUT_FORMAT, WEIGHT_FORMAT) and layer in layers:
                getattr(layers[layer], ROLES[setting]).format = value
            else:
                raise ValueError(f"the plan sets {setting} of layer '{layer}', which has none")


def current_plan(quantized: Any = None, sparse: Any = None) -> Plan:
    """The plan a QuantizedModel and/or SparseModel have in effect now."""
    plan: Plan = {}
    if quantized is not None:
        for name, layer in quantized.layers.items():
            settings = plan.setdefault(name, {})
            for setting in (INPUT_BITS, WEIGHT_BITS):
                quantizer = getattr(layer, ROLES[setting])
                if quantizer.format.classic:
                    settings[setting] = quantizer.num_bits
                else:
                    settings[FORMAT_OF[setting]] = quantizer.format.spelling
    if sparse is not None:
        for name, sparsifier in sparse.sparsifiers.items():
            plan.setdefault(name, {})[THRESHOLD] = sparsifier.threshold
    return plan


def layer_formats(plan: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Layer -> what its input and weight are quantized to, as short format names (`int8` for a
    bit width of 8), for layers that have any: the format per layer a report shows."""
    found: dict[str, dict[str, str]] = {}
    for layer, settings in plan.items():
        for bits, role in ((INPUT_BITS, "input"), (WEIGHT_BITS, "weight")):
            if FORMAT_OF[bits] in settings:
                found.setdefault(layer, {})[role] = str(settings[FORMAT_OF[bits]])
            elif bits in settings:
                found.setdefault(layer, {})[role] = integer_format(settings[bits]).spelling
    return found
