"""Configurations of a QuantizedModel for other toolchains: a plain JSON plan and NVIDIA
modelopt's `quant_cfg` (its list form), so that a result can continue into a deployment flow."""

from __future__ import annotations

from typing import Any

from model_explorer.errors import UserError
from model_explorer.formats import FORMATS, Placement
from model_explorer.quantization.model import QuantizedModel
from model_explorer.quantization.quantizer import TensorQuantizer


def modelopt_quantizer_config(quantizer: TensorQuantizer, name: str = "") -> dict[str, Any]:
    """modelopt's attributes for a quantizer in its format, as the format's family writes them
    (`FormatFamily.modelopt`: integers with `num_bits`, `axis`, `unsigned`, `narrow_range`,
    group-wise ones with static `block_sizes`; FP8 `num_bits` (4, 3) or (5, 2) with `axis`; MX
    and NVFP4 dynamic `block_sizes` with their scale formats, as modelopt's own configs have
    them). modelopt's block axis is the quantizer's (the layer's input channels). `name` is
    the quantizer's, for a refusal."""
    chosen = quantizer.format
    if quantizer.asymmetric:
        raise UserError(
            "modelopt's integer quantizers are symmetric (no zero point): a configuration with "
            "quantization.input.asymmetric has no modelopt form; export it as ONNX QDQ instead"
        )
    config = chosen.modelopt(quantizer.placement)
    if config is None:
        where = f"quantizer '{name}': " if name else ""
        raise UserError(
            f"{where}format {chosen.spelling} has no modelopt form; choose one of "
            f"{', '.join(_modelopt_families())} for a modelopt export"
        )
    return config


def _modelopt_families() -> list[str]:
    """The format families modelopt has a form of (at their default options)."""
    return [
        entry.name
        for entry in FORMATS.entries()
        if entry.builder.modelopt(entry.options(), Placement()) is not None
    ]


def _quantizer_entry(quantizer: TensorQuantizer, with_amax: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "format": quantizer.format.spelling,
        "num_bits": quantizer.num_bits,
        "axis": quantizer.axis,
        "unsigned": quantizer.unsigned,
        "narrow_range": quantizer.narrow_range,
        "enabled": quantizer.enabled,
    }
    if with_amax:
        amax = quantizer.amax
        entry["amax"] = None if amax is None else amax.detach().cpu().reshape(-1).tolist()
    if quantizer.asymmetric:  # the range [low, amax] and its zero point at these bits
        entry["asymmetric"] = True
        if with_amax and amax is not None:
            params = quantizer.params()
            entry["low"] = -params.zero * float(params.scale.reshape(-1)[0])
            entry["zero_point"] = params.zero
    return entry


def quantization_plan(model: QuantizedModel, with_amax: bool = True) -> dict[str, dict[str, Any]]:
    """Layer name -> {'type', 'input': {...}, 'weight': {...}}: format (its short name), bits,
    axis, signedness and amax (a list: one value per tensor, or one per channel); an
    asymmetric quantizer adds its range's low end and zero point. JSON-serialisable."""
    plan = {}
    for name, layer in model.layers.items():
        layer.weight_quantizer._sync(layer.weight)  # type: ignore[attr-defined]
        plan[name] = {
            "type": layer.float_type.__name__,
            "input": _quantizer_entry(layer.input_quantizer, with_amax),
            "weight": _quantizer_entry(layer.weight_quantizer, with_amax),
        }
    return plan


def modelopt_config(model: QuantizedModel, algorithm: str = "max") -> dict[str, Any]:
    """A modelopt quantization config reproducing the model's quantizers: one `quant_cfg`
    entry per quantizer name (`modelopt_quantizer_config`: `num_bits`, `axis`, `unsigned`,
    `narrow_range` for integers, `block_sizes` for group-wise and block formats), after an
    entry that disables every other quantizer. Use it with
    `modelopt.torch.quantization.quantize(float_model, config, forward_loop)`; modelopt names
    its quantizers as this project does (`<layer>.input_quantizer`, `<layer>.weight_quantizer`)."""
    entries: list[dict[str, Any]] = [{"quantizer_name": "*", "enable": False}]
    for name, quantizer in model.quantizers.items():
        entries.append(
            {
                "quantizer_name": name,
                "cfg": modelopt_quantizer_config(quantizer, name),
                "enable": quantizer.enabled,
            }
        )
    return {"quant_cfg": entries, "algorithm": algorithm}
