"""Calibration files: the data quantizers' statistics and what discovery found, not the model.

A file records, per quantized layer, its type and weight shape (to refuse a file made for
another model) and the calibrator state of its input quantizer (and of the second operand of a
product of activations), plus the modules where products outside layers' forwards run and the
layers that never ran (see model.py; its QuantizedModel calls these functions, so they take
it untyped rather than import it back). Files load with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path
from model_explorer.quantization.attention import ActivationProduct
from model_explorer.quantization.calibrators import calibrator_from_state

CALIBRATION_FORMAT = "model_explorer.calibration"
CALIBRATION_VERSION = 2


def layer_signature(layers: dict[str, nn.Module]) -> dict[str, dict[str, Any]]:
    """Each quantized layer's type and weight shape (none for a product of activations)."""
    signature = {}
    for name, layer in layers.items():
        if isinstance(layer, ActivationProduct):
            signature[name] = {"type": "matmul", "weight_shape": []}
        else:
            signature[name] = {
                "type": layer.float_type.__name__,
                "weight_shape": list(layer.weight.shape),
            }
    return signature


def _entry(quantizer: Any) -> dict[str, Any]:
    return {"calibrator": quantizer.calibrator.state(), "unsigned": quantizer.unsigned}


def save(model: Any, path: Path, extra: dict[str, Any] | None) -> Path:
    quantizers = {}
    for name, layer in model.layers.items():
        if layer.input_quantizer.amax is None:
            raise UserError(f"calibration: layer '{name}' is not calibrated; run calibrate() first")
        quantizers[name] = _entry(layer.input_quantizer)
        if isinstance(layer, ActivationProduct):
            quantizers[name]["operand"] = _entry(layer.weight_quantizer)
    data = {
        **(extra or {}),
        "format": CALIBRATION_FORMAT,
        "version": CALIBRATION_VERSION,
        "layers": model.layer_signature(),
        "structure": model.structure(),
        "input_quantizers": quantizers,
    }
    with atomic_path(path) as temporary:
        torch.save(data, temporary)
    return path


def _read(path: Path, where: str) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(
            f"{where}: '{path}' does not exist; make it with `model-explorer calibrate WORKLOAD`"
        )
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise UserError(
            f"{where}: '{path}' is not a readable calibration file ({error})"
        ) from error
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise UserError(f"{where}: '{path}' is not a model_explorer calibration file")
    return data


def _restore(quantizer: Any, entry: dict[str, Any], device: torch.device) -> None:
    quantizer.unsigned = entry["unsigned"]
    quantizer.restore_calibrator(calibrator_from_state(entry["calibrator"]))
    quantizer.to(device)


def load(model: Any, path: Path, where: str) -> dict[str, Any]:
    data = _read(path, where)
    if "structure" in data and not model.discovered:
        model.adopt_structure(data["structure"])
    mine, theirs = model.layer_signature(), data["layers"]
    if mine != theirs:
        raise UserError(
            f"{where}: '{path}' {_signature_difference(mine, theirs)}; recalibrate "
            "with `model-explorer calibrate WORKLOAD --force`"
        )
    device = next(model.model.parameters()).device
    for name, layer in model.layers.items():
        entry = data["input_quantizers"][name]
        _restore(layer.input_quantizer, entry, device)
        if isinstance(layer, ActivationProduct):
            _restore(layer.weight_quantizer, entry["operand"], device)
    return data


def _signature_difference(mine: dict[str, Any], theirs: dict[str, Any]) -> str:
    missing = [name for name in mine if name not in theirs]
    extra = [name for name in theirs if name not in mine]
    if missing or extra:
        return (
            f"was made for another model: it has no layer {missing[:3]} and has layers "
            f"{extra[:3]} this model does not"
            if missing and extra
            else f"was made for another model: layers {(missing or extra)[:3]} "
            f"{'are missing from the file' if missing else 'are not in this model'}"
        )
    for name, layer in mine.items():
        if layer != theirs[name]:
            return (
                f"was made for another model: layer '{name}' is {theirs[name]['type']} "
                f"{theirs[name]['weight_shape']} there and {layer['type']} "
                f"{layer['weight_shape']} here"
            )
    return "does not match this model"
