"""Configurations of a QuantizedModel for other toolchains: a plain JSON plan and NVIDIA
modelopt's `quant_cfg` (its list form), so that a result can continue into a deployment flow."""

from __future__ import annotations

from typing import Any

from model_explorer.errors import UserError
from model_explorer.quantization.model import QuantizedModel
from model_explorer.quantization.quantizer import TensorQuantizer

# An element type's (exponent bits, mantissa bits) as modelopt spells a float format's num_bits.
_MODELOPT_ELEMENTS = {
    "e4m3": (4, 3),
    "e5m2": (5, 2),
    "e3m2": (3, 2),
    "e2m3": (2, 3),
    "e2m1": (2, 1),
}


def modelopt_quantizer_config(quantizer: TensorQuantizer) -> dict[str, Any]:
    """modelopt's attributes for a quantizer in its format: integers with `num_bits`, `axis`,
    `unsigned`, `narrow_range` (group-wise: static `block_sizes` along the quantizer's block
    axis); FP8 `num_bits` (4, 3) or (5, 2) with `axis`; MX and NVFP4 dynamic `block_sizes` with
    their scale formats ((8, 0) E8M0, (4, 3) E4M3), as modelopt's own MX and NVFP4 configs have
    them. modelopt's block axis is the one named here (the layer's input channels)."""
    chosen = quantizer.format
    options = chosen.options
    if quantizer.asymmetric:
        raise UserError(
            "modelopt's integer quantizers are symmetric (no zero point): a configuration with "
            "quantization.input.asymmetric has no modelopt form; export it as ONNX QDQ instead"
        )
    if chosen.classic:
        return {
            "num_bits": quantizer.num_bits,
            "axis": quantizer.axis,
            "unsigned": quantizer.unsigned,
            "narrow_range": quantizer.narrow_range,
        }
    axis = quantizer.block_axis
    if chosen.family == "int":
        return {
            "num_bits": options.num_bits,
            "unsigned": quantizer.unsigned,
            "narrow_range": quantizer.narrow_range,
            # Static: right for a weight (its groups' max); modelopt calibrates an input's static
            # groups once where ours take each group's max at run time, and its dynamic integer
            # blocks need scale formats other than our FP16.
            "block_sizes": {axis: options.group_size, "type": "static"},
        }
    if chosen.family.startswith("fp8"):
        return {"num_bits": _MODELOPT_ELEMENTS[chosen.family[4:]], "axis": quantizer.axis}
    if chosen.family == "nvfp4":
        scale = {"scale_bits": (4, 3)}
        element = (2, 1)
    else:
        scale = {"scale_bits": (8, 0)}
        name = getattr(options, "element", {"mxfp4": "e2m1", "mxint8": "int8"}.get(chosen.family))
        element = 8 if name == "int8" else _MODELOPT_ELEMENTS[name]
    return {
        "num_bits": element,
        "block_sizes": {axis: options.block_size, "type": "dynamic", **scale},
    }


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
                "cfg": modelopt_quantizer_config(quantizer),
                "enable": quantizer.enabled,
            }
        )
    return {"quant_cfg": entries, "algorithm": algorithm}
