"""The workload-level steps around a QuantizedModel: build it, calibrate it, reuse the file."""

from __future__ import annotations

import fnmatch
import hashlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from model_explorer.errors import UserError
from model_explorer.fileio import read_torch_file
from model_explorer.modules import run_on
from model_explorer.quantization.calibration_file import quantizer_settings, settings_difference
from model_explorer.quantization.coverage import Coverage, FloatLayer, weight_coverage
from model_explorer.quantization.model import QuantizedModel
from model_explorer.quantization.recipe import calibration_recipe, recipe_difference
from model_explorer.quantization.spec import CalibrationSpec

if TYPE_CHECKING:
    from model_explorer.workload.context import WorkloadContext

log = logging.getLogger(__name__)


def weights_fingerprint(model: nn.Module) -> str:
    """A short hash of the model's weights, stored in calibration files to spot stale ones."""
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def calibration_file(context: WorkloadContext) -> Path:
    spec: CalibrationSpec = context.workload.require("calibration")
    if spec.file is None:
        raise UserError(
            "workload.calibration.file: name the file that holds the calibration "
            "(e.g. results/<workload>_calibration.pt)"
        )
    return spec.resolve(spec.file)


def quantized_model(context: WorkloadContext) -> QuantizedModel:
    """The workload's model with its layers swapped as `quantization:` says, not calibrated,
    where it was built; a weight axis its layers cannot use is refused."""
    model = QuantizedModel.from_spec(context.build_model(), context.workload.quantization)
    check_weight_axis(model)
    return model


def build_quantized_model(
    context: WorkloadContext, load_calibration: bool = True
) -> QuantizedModel:
    """The workload's model with its layers swapped as `quantization:` says, on the device,
    calibrated from `calibration.file` unless `load_calibration` is False."""
    model = quantized_model(context)
    if load_calibration:
        path = calibration_file(context)
        data = model.load_calibration(path, where="workload.calibration.file")
        check_recipe(context, data, path)
        stored = data.get("weights")
        if stored is not None and stored != weights_fingerprint(model.model):
            log.warning(
                "%s was calibrated on other weights than %s; recalibrate with "
                "`model-explorer calibrate --force`",
                path,
                context.workload.model.weights,
            )
        fix_amax(model, context.workload.require("calibration"))
    return model.to(context.device)


def calibrate_workload(
    context: WorkloadContext, force: bool = False, if_missing: bool = False
) -> tuple[QuantizedModel, Path, bool]:
    """Calibrate on `calibration.datasets.calibrate` and write `calibration.file`.

    Returns (model, path, calibrated): with `if_missing`, an existing file made for the same
    weights is loaded instead. An existing file is never replaced without `force`, except a
    stale one (other weights) under `if_missing`."""
    spec: CalibrationSpec = context.workload.require("calibration")
    path = calibration_file(context)
    model = quantized_model(context)
    fingerprint = weights_fingerprint(model.model)
    if path.exists() and not force:
        if not if_missing:
            raise UserError(
                f"workload.calibration.file: '{path}' exists; pass --force to overwrite it"
            )
        stored = read_torch_file(path, "workload.calibration.file", "calibration file")
        stored = stored if isinstance(stored, dict) else {}
        difference = settings_difference(stored.get("settings"), quantizer_settings(model))
        difference = difference or recipe_difference(stored.get("recipe"), recipe(context))
        if stored.get("weights") == fingerprint and difference is None:
            model.load_calibration(path, where="workload.calibration.file")
            return fix_amax(model, spec).to(context.device), path, False
        reason = "other weights" if stored.get("weights") != fingerprint else difference
        log.warning("%s does not match the workload (%s); recalibrating", path, reason)
    _calibrate(model.to(context.device), spec, context)
    extra = {"weights": fingerprint, "method": spec.method, "recipe": recipe(context)}
    model.save_calibration(path, extra=extra)
    return fix_amax(model, spec), path, True


def recipe(context: WorkloadContext) -> dict:
    spec: CalibrationSpec = context.workload.require("calibration")
    return calibration_recipe(spec, context.workload.seed)


def check_recipe(context: WorkloadContext, data: dict, path: Path) -> None:
    """A calibration file made from other calibration settings than the workload's (method,
    its options, the data, the seed) is refused, naming the setting; one made before they
    were recorded is used with a warning."""
    recorded = data.get("recipe")
    if recorded is None:
        log.warning(
            "%s does not record the calibration settings it was made with (an older "
            "version's); recalibrate with `model-explorer calibrate --force` to be sure it fits",
            path,
        )
        return
    difference = recipe_difference(recorded, recipe(context))
    if difference is not None:
        raise UserError(
            f"workload.calibration.file: '{path}' was made with other calibration settings "
            f"({difference}); recalibrate with `model-explorer calibrate --if-missing "
            "WORKLOAD` (it recalibrates a file that does not match) or point calibration.file "
            "at another file"
        )


def report_coverage(context: WorkloadContext, model: QuantizedModel) -> Coverage:
    """The share of the model's weight MACs that run on quantized weights, on one batch of the
    calibration data (the exploration data where the workload has none), and a warning naming
    each layer left in float above `quantization.coverage_warning` of them that the workload
    did not exclude."""
    role = "calibrate" if context.has_dataset("calibrate") else "exploration"
    inputs = next(iter(context.batches(role)))[0]
    coverage, warned = measure_coverage(model, inputs, context.workload.quantization)
    if warned:
        named = ", ".join(f"{layer.name} ({layer.type}, {layer.share:.1%})" for layer in warned)
        log.warning(
            "%s: layers holding weights run in float, which quantization.include/exclude did "
            "not leave out: %s; quantization.coverage_warning (%s) sets the share warned about",
            coverage.headline,
            named,
            context.workload.quantization.coverage_warning,
        )
    threshold = context.workload.quantization.coverage_warning
    unread = [module for module in coverage.unread if module.share > threshold]
    if unread:
        log.warning(
            "weights that no product reads stay in float whatever the plan (lookups such as "
            "embeddings: no layer quantizes them yet): %s of the model's weight elements",
            ", ".join(f"{m.name} ({m.type}, {m.share:.1%})" for m in unread),
        )
    return coverage


def measure_coverage(
    model: QuantizedModel, inputs: Any, spec: Any
) -> tuple[Coverage, list[FloatLayer]]:
    """`model`'s coverage on `inputs`, and its float layers that `spec` (the workload's
    `quantization:`) warns about: above `coverage_warning` of the MACs and not left out."""
    with torch.no_grad():
        coverage = weight_coverage(model, lambda: run_on(model, inputs))
    warned = coverage.warned(
        spec.coverage_warning, lambda name, kind: excluded_layer(spec, name, kind)
    )
    return coverage, warned


def excluded_layer(spec: Any, name: str, kind: str) -> bool:
    """Whether the workload left a layer out: by name, or by a quantizable type it did not
    list in `layer_types`."""
    from model_explorer.modules import selected
    from model_explorer.quantization.spec import QUANTIZABLE_LAYERS

    left_out_type = kind in QUANTIZABLE_LAYERS and kind not in spec.layer_types
    return left_out_type or not selected(name, spec.include, spec.exclude)


def check_weight_axis(model: QuantizedModel) -> None:
    """`quantization.weight.axis` must name a dimension of every quantized layer's weight."""
    axis = model.weight_spec.axis
    if axis is None:
        return
    for name, layer in model.layers.items():
        weight = getattr(layer, "weight", None)
        if isinstance(weight, torch.Tensor) and not -weight.dim() <= axis < weight.dim():
            raise UserError(
                f"workload.quantization.weight.axis: axis {axis} is outside the {weight.dim()} "
                f"dimensions of the weight of layer '{name}' (shape {list(weight.shape)}); use "
                "0 (per output channel) or null (per tensor)"
            )


def calibrate_in_memory(model: QuantizedModel, context: WorkloadContext) -> QuantizedModel:
    """Calibrate `model` as `calibration:` says, without writing a file."""
    spec: CalibrationSpec = context.workload.require("calibration")
    return fix_amax(_calibrate(model, spec, context), spec)


def _calibrate(
    model: QuantizedModel, spec: CalibrationSpec, context: WorkloadContext
) -> QuantizedModel:
    options = spec.options.model_dump() if spec.options is not None else {}
    model.calibrate(context.loader("calibrate"), spec.method, **options)
    return model


def fix_amax(model: QuantizedModel, spec: CalibrationSpec) -> QuantizedModel:
    """The input quantizers `calibration.amax` names (by pattern, later patterns winning)
    with the amax it gives, at every bit width; a pattern naming none is refused. Applied
    after calibration and after loading a calibration file, never stored in the file, so that
    changing the setting needs no recalibration."""
    inputs = [name for name in model.quantizers if name.endswith(".input_quantizer")]
    for pattern, amax in (spec.amax or {}).items():
        chosen = [name for name in inputs if fnmatch.fnmatchcase(name, pattern)]
        if not chosen:
            raise UserError(
                f"workload.calibration.amax: '{pattern}' names no input quantizer of the model; "
                f"they are named like '{inputs[0] if inputs else 'layer.input_quantizer'}'"
            )
        for name in chosen:
            model.quantizers[name].fix_amax(amax)
    return model
