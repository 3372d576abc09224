"""Calibration files: the data quantizers' statistics and what discovery found, not the model.

A file records, per quantized layer, its type and weight shape (to refuse a file made for
another model) and the calibrator state of its input quantizer (and of the second operand of a
product of activations), that of each operand quantizer (operands.py), plus the modules where
products outside layers' forwards run, the operand sites found there and the layers that never
ran (see model.py; its QuantizedModel calls these functions, so they take
it untyped rather than import it back). Files load with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path, read_torch_file
from model_explorer.quantization.attention import ActivationProduct
from model_explorer.quantization.calibrators import calibrator_from_state
from model_explorer.quantization.spec import RECALIBRATE

CALIBRATION_FORMAT = "model_explorer.calibration"
# 3: the quantizer settings the file was made with are recorded ("settings").
# 4: histograms keep the negative side, calibrators the maximum (asymmetric ranges).
CALIBRATION_VERSION = 4
SETTINGS = ("axis", "unsigned", "narrow_range", "asymmetric")
# What a setting was before files recorded it.
UNRECORDED = {"asymmetric": False}

log = logging.getLogger(__name__)


def quantizer_settings(model: Any) -> dict[str, dict[str, Any]]:
    """The settings of the workload's quantizers that a calibration belongs to."""
    return {
        role: {key: getattr(spec, key) for key in SETTINGS}
        for role, spec in (("input", model.input_spec), ("weight", model.weight_spec))
    }


def settings_difference(recorded: Any, current: dict[str, dict[str, Any]]) -> str | None:
    """What differs between the settings a file records and the workload's (None: alike)."""
    if recorded == current:
        return None
    recorded = recorded if isinstance(recorded, dict) else {}
    for role, settings in current.items():
        theirs = recorded.get(role) if isinstance(recorded.get(role), dict) else {}
        for key, value in settings.items():
            recorded_value = theirs.get(key, UNRECORDED.get(key, "unrecorded"))
            if recorded_value != value:
                return (
                    f"quantization.{role}.{key} {recorded_value!r} there and {value!r} in the "
                    "workload"
                )
    return None


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


def structure(model: Any) -> dict[str, Any]:
    """What discovery and calibration found, as plain data: the scopes of the interception,
    the products and operand sites found there by their keys and names, the unused layers."""
    interceptor = model.interceptor
    return {
        "scopes": list(model.scopes),
        "products": [
            [scope, index, name] for (scope, index), (name, _) in interceptor.products.items()
        ],
        "operands": [[*key, name] for key, (name, _) in interceptor.operands.items()],
        "unused": list(model.unused),
    }


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
        "structure": structure(model),
        "input_quantizers": quantizers,
        "operand_quantizers": {
            name: _entry(quantizer)
            for name, quantizer in model.operand_quantizers.items()
            if quantizer.amax is not None
        },
        "settings": quantizer_settings(model),
        "operand_sites": model.interceptor.make_operands is not None,
    }
    with atomic_path(path) as temporary:
        torch.save(data, temporary)
    return path


def _read(path: Path, where: str) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(
            f"{where}: '{path}' does not exist; make it with `model-explorer calibrate WORKLOAD`"
        )
    data = read_torch_file(path, where, "calibration file")
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise UserError(f"{where}: '{path}' is not a model_explorer calibration file")
    for key in ("layers", "input_quantizers"):
        if not isinstance(data.get(key), dict):
            raise UserError(
                f"{where}: '{path}' is a damaged calibration file: '{key}' is missing or not a "
                f"mapping; recalibrate with {RECALIBRATE}"
            )
    return data


def _check_settings(model: Any, data: dict[str, Any], path: Path, where: str) -> None:
    wanted = model.interceptor.make_operands is not None
    if bool(data.get("operand_sites", False)) != wanted:
        raise UserError(
            f"{where}: '{path}' was made with quantization.operand_quantizers "
            f"{str(not wanted).lower()} and the workload sets {str(wanted).lower()}; "
            f"recalibrate with {RECALIBRATE}"
        )
    if "settings" not in data:
        log.warning(
            "%s: made by an older version, the file does not record the quantizer settings it "
            f"was made with; recalibrate with {RECALIBRATE} to be "
            "sure it fits",
            path,
        )
        return
    difference = settings_difference(data["settings"], quantizer_settings(model))
    if difference is not None:
        raise UserError(
            f"{where}: '{path}' was made with other quantizer settings ({difference}); "
            f"recalibrate with {RECALIBRATE}"
        )


def _restore(quantizer: Any, entry: dict[str, Any], device: torch.device) -> None:
    quantizer.unsigned = entry["unsigned"]
    quantizer.restore_calibrator(calibrator_from_state(entry["calibrator"]))
    quantizer.to(device)


def load(model: Any, path: Path, where: str) -> dict[str, Any]:
    data = _read(path, where)
    _check_settings(model, data, path, where)
    if "structure" in data and not model.discovered:
        model.adopt_structure(data["structure"])
    mine, theirs = model.layer_signature(), data["layers"]
    if mine != theirs:
        raise UserError(
            f"{where}: '{path}' {_signature_difference(mine, theirs)}; recalibrate "
            f"with {RECALIBRATE}"
        )
    device = next(model.model.parameters()).device
    for name, layer in model.layers.items():
        try:
            entry = data["input_quantizers"][name]
            _restore(layer.input_quantizer, entry, device)
            if isinstance(layer, ActivationProduct):
                _restore(layer.weight_quantizer, entry["operand"], device)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise UserError(
                f"{where}: '{path}' is a damaged calibration file: the entry of layer '{name}' "
                f"is missing or broken ({type(error).__name__}: {error}); recalibrate with "
                f"{RECALIBRATE}"
            ) from None
    _restore_operands(model, data, device)
    return data


def _restore_operands(model: Any, data: dict[str, Any], device: torch.device) -> None:
    """Operand quantizers from their entries; one without (its site never ran) stays off."""
    entries = data.get("operand_quantizers") or {}
    for name, quantizer in model.operand_quantizers.items():
        if name in entries:
            _restore(quantizer, entries[name], device)
        else:
            quantizer.enabled = False


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
