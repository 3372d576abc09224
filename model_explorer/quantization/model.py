"""QuantizedModel: a model whose convolution and linear layers are swapped for fake-quantized ones.

The explorable parameters are the quantizers' bit widths, ordered as the original tool ordered
them: per layer in module order, the input quantizer, then the weight quantizer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from model_explorer.errors import UserError
from model_explorer.fileio import atomic_path
from model_explorer.modules import selected, set_child
from model_explorer.quantization.calibrators import (
    Calibrator,
    calibrator_from_state,
    make_calibrator,
)
from model_explorer.quantization.layers import QUANT_LAYERS, QuantLayer
from model_explorer.quantization.quantizer import TensorQuantizer, WeightQuantizer
from model_explorer.quantization.spec import QUANTIZABLE_LAYERS, QuantizationSpec, QuantizerSpec

log = logging.getLogger(__name__)

CALIBRATION_FORMAT = "model_explorer.calibration"
CALIBRATION_VERSION = 1


def _quantizer(spec: QuantizerSpec, cls: type[TensorQuantizer], **extra: Any) -> TensorQuantizer:
    return cls(
        num_bits=spec.num_bits,
        axis=spec.axis,
        unsigned=spec.unsigned is True,
        narrow_range=spec.narrow_range,
        **extra,
    )


class QuantizedModel(nn.Module):
    """Swaps the chosen layers of `model` (in place) for fake-quantized ones; calling the
    QuantizedModel runs the swapped model. `restore()` puts the float layers back.

    Layers are chosen by type (`layer_types`, names as in torch.nn) and by module name
    (`include` / `exclude`, shell-style patterns such as `layer4.*`).
    """

    def __init__(
        self,
        model: nn.Module,
        layer_types: Sequence[str] = QUANTIZABLE_LAYERS,
        include: Sequence[str] = ("*",),
        exclude: Sequence[str] = (),
        input: QuantizerSpec | None = None,  # noqa: A002 - the workload's key
        weight: QuantizerSpec | None = None,
        weight_cache: int | None = None,
    ) -> None:
        super().__init__()
        unknown = sorted(set(layer_types) - set(QUANT_LAYERS))
        if unknown:
            raise UserError(
                f"quantization.layer_types: cannot quantize {unknown}; supported: "
                f"{', '.join(QUANT_LAYERS)}"
            )
        self.input_spec = input or QuantizerSpec()
        self.weight_spec = weight or QuantizerSpec(axis=0)
        self.model = model
        self.layers: dict[str, QuantLayer] = {}
        self._float_layers: dict[str, nn.Module] = {}
        wanted = {QUANT_LAYERS[name].float_type: QUANT_LAYERS[name] for name in layer_types}
        for name, module in list(model.named_modules()):
            cls = wanted.get(type(module))
            if cls is None or not name:
                continue
            if not selected(name, include, exclude):
                continue
            layer = cls.from_float(
                module,
                _quantizer(self.input_spec, TensorQuantizer),
                _quantizer(self.weight_spec, WeightQuantizer, cache_size=weight_cache),
            )
            set_child(model, name, layer)  # type: ignore[arg-type]
            self.layers[name] = layer
            self._float_layers[name] = module
        if not self.layers:
            raise UserError(
                f"quantization: the model has no layer of types {list(layer_types)} matching "
                f"include {list(include)} and exclude {list(exclude)}"
            )
        # A new nn.Module starts in training mode; take the wrapped model's mode instead, so
        # that code restoring "the" mode does not switch an eval model's batch norms to training.
        self.train(model.training)

    @classmethod
    def from_spec(cls, model: nn.Module, spec: QuantizationSpec) -> QuantizedModel:
        """Build from the workload's `quantization:` section."""
        return cls(
            model,
            spec.layer_types,
            spec.include,
            spec.exclude,
            spec.input,
            spec.weight,
            spec.weight_cache,
        )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    # -- the explorable parameters --------------------------------------------------------
    @property
    def quantizers(self) -> dict[str, TensorQuantizer]:
        """Every quantizer by name, in exploration order."""
        found: dict[str, TensorQuantizer] = {}
        for name, layer in self.layers.items():
            found[f"{name}.input_quantizer"] = layer.input_quantizer
            found[f"{name}.weight_quantizer"] = layer.weight_quantizer
        return found

    @property
    def explorable_modules(self) -> list[str]:
        """Quantizer names in genome order: per layer, input then weight."""
        return list(self.quantizers)

    @property
    def bit_widths(self) -> list[int]:
        return [q.num_bits for q in self.quantizers.values()]

    @bit_widths.setter
    def bit_widths(self, values: Sequence[int]) -> None:
        quantizers = list(self.quantizers.values())
        if len(values) != len(quantizers):
            raise ValueError(f"expected {len(quantizers)} bit widths, got {len(values)}")
        for quantizer, bits in zip(quantizers, values, strict=True):
            quantizer.num_bits = int(bits)

    def set_enabled(self, enabled: bool = True, names: Iterable[str] | None = None) -> None:
        """Turn quantizers on or off (all, or those named)."""
        quantizers = self.quantizers
        for name in names if names is not None else quantizers:
            quantizers[name].enabled = enabled

    @contextmanager
    def preserved_settings(self) -> Iterator[QuantizedModel]:
        """Within the block, bit widths and on/off states may change; on leaving it every
        quantizer has its bit width and state back."""
        bits = self.bit_widths
        enabled = {name: quantizer.enabled for name, quantizer in self.quantizers.items()}
        try:
            yield self
        finally:
            self.bit_widths = bits
            for name, quantizer in self.quantizers.items():
                quantizer.enabled = enabled[name]

    # -- calibration ----------------------------------------------------------------------
    def calibrate(
        self,
        batches: Iterable[Any],
        method: str = "percentile",
        percentile: float = 99.99,
        num_bins: int = 2048,
    ) -> None:
        """Set every input quantizer's amax from the activations of `batches` (input tensors
        or (inputs, targets) pairs), seen unquantized. Weight amax needs no data."""
        inputs = [layer.input_quantizer for layer in self.layers.values()]
        for quantizer in inputs:
            quantizer.start_calibration(
                make_calibrator(method, quantizer.axis, num_bins=num_bins, percentile=percentile)
            )
        device = next(self.model.parameters()).device
        seen = 0
        training = self.model.training
        # Calibrate on float activations (weights unquantized too), as modelopt does, so that
        # amax does not depend on the bit widths in place at calibration time.
        self.model.eval()
        try:
            with self.preserved_settings(), torch.no_grad():
                for layer in self.layers.values():
                    layer.weight_quantizer.enabled = False
                for batch in batches:
                    data = batch[0] if isinstance(batch, (tuple, list)) else batch
                    self.model(data.to(device))
                    seen += 1
        finally:
            self.model.train(training)
            for quantizer in inputs:
                quantizer.calibrating = False
        if seen == 0:
            raise UserError("calibration: the calibration data holds no batches")
        for layer in self.layers.values():
            self._finish(layer.input_quantizer, layer.input_quantizer.calibrator)
        log.info("calibrated %d input quantizers on %d batches (%s)", len(inputs), seen, method)

    def _finish(self, quantizer: TensorQuantizer, calibrator: Calibrator) -> None:
        if self.input_spec.unsigned == "auto":
            quantizer.unsigned = calibrator.min_value is not None and calibrator.min_value >= 0
        quantizer.restore_calibrator(calibrator)

    def layer_signature(self) -> dict[str, dict[str, Any]]:
        """What a calibration file must match: each quantized layer's type and weight shape."""
        return {
            name: {"type": layer.float_type.__name__, "weight_shape": list(layer.weight.shape)}  # type: ignore[attr-defined]
            for name, layer in self.layers.items()
        }

    def save_calibration(
        self, path: str | os.PathLike[str], extra: dict[str, Any] | None = None
    ) -> Path:
        """Write the input quantizers' calibration (amax and histograms), not the model, with
        `extra` plain data beside it."""
        quantizers = {}
        for name, layer in self.layers.items():
            quantizer = layer.input_quantizer
            if quantizer.amax is None:
                raise UserError(
                    f"calibration: layer '{name}' is not calibrated; run calibrate() first"
                )
            quantizers[name] = {
                "calibrator": quantizer.calibrator.state(),
                "unsigned": quantizer.unsigned,
            }
        data = {
            **(extra or {}),
            "format": CALIBRATION_FORMAT,
            "version": CALIBRATION_VERSION,
            "layers": self.layer_signature(),
            "input_quantizers": quantizers,
        }
        path = Path(path)
        with atomic_path(path) as temporary:
            torch.save(data, temporary)
        return path

    def load_calibration(
        self, path: str | os.PathLike[str], where: str = "calibration.file"
    ) -> dict[str, Any]:
        """Load a file written by `save_calibration` and return its contents; it must come from
        a model with the same quantized layers (names, types and weight shapes)."""
        path = Path(path)
        if not path.is_file():
            raise UserError(
                f"{where}: '{path}' does not exist; make it with "
                "`model-explorer calibrate WORKLOAD`"
            )
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise UserError(
                f"{where}: '{path}' is not a readable calibration file ({error})"
            ) from error
        if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
            raise UserError(f"{where}: '{path}' is not a model_explorer calibration file")
        mine, theirs = self.layer_signature(), data["layers"]
        if mine != theirs:
            raise UserError(
                f"{where}: '{path}' {_signature_difference(mine, theirs)}; recalibrate "
                "with `model-explorer calibrate WORKLOAD --force`"
            )
        for name, layer in self.layers.items():
            entry = data["input_quantizers"][name]
            calibrator = calibrator_from_state(entry["calibrator"])
            device = layer.weight.device  # type: ignore[attr-defined]
            layer.input_quantizer.unsigned = entry["unsigned"]
            layer.input_quantizer.restore_calibrator(calibrator)
            layer.input_quantizer.to(device)
        return data

    # -- undo -----------------------------------------------------------------------------
    def restore(self) -> nn.Module:
        """Put the float layers back into the model and return it."""
        for name, module in self._float_layers.items():
            set_child(self.model, name, module)
        return self.model


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
