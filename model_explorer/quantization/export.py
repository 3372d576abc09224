"""Configurations of a QuantizedModel for other toolchains: a plain JSON plan and NVIDIA
modelopt's `quant_cfg` (its list form), so that a result can continue into a deployment flow."""

from __future__ import annotations

from typing import Any

from model_explorer.quantization.model import QuantizedModel
from model_explorer.quantization.quantizer import TensorQuantizer


def _quantizer_entry(quantizer: TensorQuantizer, with_amax: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "num_bits": quantizer.num_bits,
        "axis": quantizer.axis,
        "unsigned": quantizer.unsigned,
        "narrow_range": quantizer.narrow_range,
        "enabled": quantizer.enabled,
    }
    if with_amax:
        amax = quantizer.amax
        entry["amax"] = None if amax is None else amax.detach().cpu().reshape(-1).tolist()
    return entry


def quantization_plan(model: QuantizedModel, with_amax: bool = True) -> dict[str, dict[str, Any]]:
    """Layer name -> {'type', 'input': {...}, 'weight': {...}}: bits, axis, signedness and amax
    (a list: one value per tensor, or one per channel). JSON-serialisable."""
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
    entry per quantizer name (with `num_bits`, `axis`, `unsigned`, `narrow_range`), after an
    entry that disables every other quantizer. Use it with
    `modelopt.torch.quantization.quantize(float_model, config, forward_loop)`; modelopt names
    its quantizers as this project does (`<layer>.input_quantizer`, `<layer>.weight_quantizer`)."""
    entries: list[dict[str, Any]] = [{"quantizer_name": "*", "enable": False}]
    for name, quantizer in model.quantizers.items():
        entries.append(
            {
                "quantizer_name": name,
                "cfg": {
                    "num_bits": quantizer.num_bits,
                    "axis": quantizer.axis,
                    "unsigned": quantizer.unsigned,
                    "narrow_range": quantizer.narrow_range,
                },
                "enable": quantizer.enabled,
            }
        )
    return {"quant_cfg": entries, "algorithm": algorithm}
