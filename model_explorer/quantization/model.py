"""QuantizedModel: a model whose convolution, linear and attention layers are swapped for
fake-quantized ones.

The explorable parameters are the quantizers' bit widths, ordered as the original tool ordered
them: per layer in module order, the input quantizer, then the weight quantizer. Products that
do not run through a layer's forward (a weight handed to `F.linear` by other code, products of
activations) are quantized too, see functional.py; layers that never run on the calibration data
(auxiliary heads off in eval mode) are reported once and left in float, out of the search.
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
from model_explorer.modules import run_on, set_child, to_device, unfused_attention
from model_explorer.quantization import calibration_file
from model_explorer.quantization.attention import ActivationProduct
from model_explorer.quantization.calibrators import calibrator_options
from model_explorer.quantization.functional import Interceptor
from model_explorer.quantization.layers import TransformedLayer
from model_explorer.quantization.operands import OPERANDS, OperandQuantizers
from model_explorer.quantization.quantizer import TensorQuantizer, WeightQuantizer
from model_explorer.quantization.spec import (
    CALIBRATORS,
    QUANTIZABLE_LAYERS,
    QuantizationSpec,
    QuantizerSpec,
)
from model_explorer.quantization.swap import SWAPPABLE, swap_layers
from model_explorer.tracing import Wrapper

log = logging.getLogger(__name__)


def _quantizer(spec: QuantizerSpec, cls: type[TensorQuantizer], **extra: Any) -> TensorQuantizer:
    return cls(
        num_bits=spec.num_bits,
        axis=spec.axis,
        unsigned=spec.unsigned is True,
        narrow_range=spec.narrow_range,
        asymmetric=spec.asymmetric,
        **extra,
    )


def data_quantizers(layer: nn.Module) -> list[TensorQuantizer]:
    """The quantizers of a layer whose amax comes from calibration data: the input's, and both
    operands' of a product of activations."""
    if isinstance(layer, ActivationProduct):
        return [layer.input_quantizer, layer.weight_quantizer]
    return [layer.input_quantizer]


class QuantizedModel(Wrapper, nn.Module):
    """Swaps the chosen layers of `model` (in place) for transformed layers with quantizers
    (layers a SparseModel transformed already get quantizers attached); calling the
    QuantizedModel runs the swapped model. `restore()` puts the float layers back.

    Layers are chosen by type (`layer_types`, names as in torch.nn, `MultiheadAttention`
    included) and by module name (`include` / `exclude`, shell-style patterns such as
    `layer4.*`). With `attention_matmuls`, products of two activations (Q·Kᵀ, A·V) get
    quantizers too.

    Args:
        model: the float model; its layers are swapped in place (`restore()` undoes it).
        layer_types: the torch.nn layer types to quantize (`MultiheadAttention` included).
        include: shell-style patterns of module names to quantize.
        exclude: shell-style patterns of module names to leave alone.
        input: the input quantizers' settings (bits, axis, unsigned, ...); 8-bit per tensor if None.
        weight: the weight quantizers' settings; 8-bit per output channel (axis 0) when None.
        weight_cache: how many quantized weights each weight quantizer keeps, one per bit width
            (None: all, 0: none).
        attention_matmuls: also quantize both operands of products of two activations.
        operand_quantizers: also quantize the operands of residual additions and average
            poolings whose output reaches a quantized layer (operands.py); not layers.
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
        attention_matmuls: bool = False,
        operand_quantizers: bool = False,
    ) -> None:
        super().__init__()
        unknown = sorted(set(layer_types) - set(SWAPPABLE))
        if unknown:
            raise UserError(
                f"quantization.layer_types: cannot quantize {unknown}; supported: "
                f"{', '.join(SWAPPABLE)}"
            )
        self.input_spec = input or QuantizerSpec()
        self.weight_spec = weight or QuantizerSpec(axis=0)
        self.weight_cache = weight_cache
        self.model = model
        self._calibrating: dict[str, Any] | None = None
        product = self._make_product if attention_matmuls else None
        swap = swap_layers(model, layer_types, include, exclude, self._layer_quantizers, product)
        self.layers: dict[str, nn.Module] = swap.layers
        self._float_layers: dict[str, nn.Module] = swap.replaced
        self._attached: dict[str, nn.Module] = swap.attached
        self.unused: list[str] = []
        if not self.layers:
            raise UserError(
                f"quantization: the model has no layer of types {list(layer_types)} matching "
                f"include {list(include)} and exclude {list(exclude)}"
            )
        operands = self._make_operands if operand_quantizers else None
        self.interceptor = Interceptor(product, operands)
        self._refresh_weights()
        self.scopes: list[str] = []
        self.discovered = False
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
            spec.attention_matmuls,
            spec.operand_quantizers,
        )

    def _layer_quantizers(self) -> tuple[TensorQuantizer, TensorQuantizer]:
        return (
            _quantizer(self.input_spec, TensorQuantizer),
            _quantizer(self.weight_spec, WeightQuantizer, cache_size=self.weight_cache),
        )

    def _make_product(self) -> ActivationProduct:
        """A product of activations found on the way: both operands quantized as inputs are."""
        product = ActivationProduct(
            _quantizer(self.input_spec, TensorQuantizer),
            _quantizer(self.input_spec, TensorQuantizer),
        )
        if self._calibrating is not None:
            for quantizer in data_quantizers(product):
                quantizer.start_calibration(self._new_calibrator(quantizer))
        return product

    def _make_operands(self, kind: str) -> OperandQuantizers:
        """An addition's or average pooling's operand quantizers: as inputs are."""
        made = [_quantizer(self.input_spec, TensorQuantizer) for _ in range(OPERANDS[kind])]
        if self._calibrating is not None:
            for quantizer in made:
                quantizer.start_calibration(self._new_calibrator(quantizer))
        return OperandQuantizers(made)

    def _refresh_weights(self) -> None:
        self.interceptor.weights = {
            id(layer.weight): layer
            for layer in self.layers.values()
            if isinstance(layer, TransformedLayer)
        }

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's forward, never on attention's fused fast path (which would run
        its weights in float); the first call discovers the quantizers that run."""
        with unfused_attention():
            if not self.discovered:
                return self.discover(lambda: self.model(*args, **kwargs))
            return self.model(*args, **kwargs)

    # -- products outside layers' forwards ----------------------------------------------------
    def discover(self, run: Any) -> Any:
        """Run one forward pass (`run()`) watching every torch function call, to find the
        modules that hand a layer's weight to a function or multiply activations; from then on
        the interception is active in those modules only. Returns what `run()` returned."""
        found: list[Any] = []
        scopes = self.interceptor.discover(self.model, lambda: found.append(run()))
        interceptor = self.interceptor
        self._adopt(scopes, list(interceptor.products.items()), list(interceptor.operands.items()))
        return found[0] if found else None

    def _adopt(self, scopes: list[str], products: list[Any], operands: list[Any]) -> None:
        """Take the scopes, products and operand sites a discovery (or a calibration file)
        names."""
        device = next(self.model.parameters()).device
        for key, (name, product) in products:
            set_child(self.model, name, product.to(device))
            self.interceptor.products[key] = (name, product)
            self.layers[name] = product
        for key, (name, sites) in operands:
            set_child(self.model, name, sites.to(device))
            self.interceptor.operands[key] = (name, sites)
        order = {name: index for index, (name, _) in enumerate(self.model.named_modules())}
        self.layers = dict(
            sorted(self.layers.items(), key=lambda item: order.get(item[0], len(order)))
        )
        self.scopes = list(scopes)
        self.interceptor.install(self.model, self.scopes)
        self.discovered = True

    def adopt_structure(self, structure: dict[str, Any]) -> None:
        """Rebuild what a calibration file's structure describes (calibration_file.structure),
        on a freshly swapped model."""
        self.drop_unused(structure.get("unused", []), report=False)
        products = [
            ((scope, index), (name, self._make_product()))
            for scope, index, name in structure.get("products", [])
        ]
        operands = [
            ((scope, kind, index), (name, self._make_operands(kind)))
            for scope, kind, index, name in structure.get("operands", [])
        ]
        self._adopt(list(structure.get("scopes", [])), products, operands)

    def drop_unused(self, names: Sequence[str], report: bool = True) -> None:
        """Leave layers that never run out of the search: float again, not explored."""
        for name in names:
            layer = self.layers.pop(name, None)
            if layer is None:
                continue
            if name in self._float_layers:
                set_child(self.model, name, self._float_layers.pop(name))
            else:
                layer.input_quantizer.enabled = layer.weight_quantizer.enabled = False
            self.unused.append(name)
        self._refresh_weights()
        if names and report:
            log.warning(
                "%d layer(s) did not run on the calibration data and stay in float, out of the "
                "search (e.g. auxiliary heads that run only in training): %s",
                len(names),
                ", ".join(names),
            )

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
    def operand_quantizers(self) -> dict[str, TensorQuantizer]:
        """The quantizers of additions' and average poolings' operands by name: no genes."""
        return {
            f"{name}.{child}": quantizer
            for name, sites in self.interceptor.operands.values()
            for child, quantizer in sites.named_children()
        }  # type: ignore[misc]

    @property
    def explorable_modules(self) -> list[str]:
        """Quantizer names in genome order: per layer, input then weight."""
        return list(self.quantizers)

    @property
    def bit_widths(self) -> list[int]:
        """Every quantizer's integer width, in `quantizers` order; settable as a list."""
        return [q.num_bits for q in self.quantizers.values()]

    @bit_widths.setter
    def bit_widths(self, values: Sequence[int]) -> None:
        if len(values) != len(quantizers := list(self.quantizers.values())):
            raise ValueError(f"expected {len(quantizers)} bit widths, got {len(values)}")
        for quantizer, bits in zip(quantizers, values, strict=True):
            quantizer.num_bits = int(bits)

    def set_enabled(self, enabled: bool = True, names: Iterable[str] | None = None) -> None:
        """Turn quantizers on or off (all, operand quantizers included, or those named)."""
        quantizers = {**self.quantizers, **self.operand_quantizers}
        for name in names if names is not None else quantizers:
            quantizers[name].enabled = enabled

    @contextmanager
    def preserved_settings(self) -> Iterator[QuantizedModel]:
        """Within the block, bit widths, formats and on/off states may change; on leaving it
        every quantizer has its format (or bit width) and state back."""
        quantizers = {**self.quantizers, **self.operand_quantizers}
        settings = {name: (q.format, q.enabled) for name, q in quantizers.items()}
        try:
            yield self
        finally:
            for name, quantizer in quantizers.items():
                quantizer.format, quantizer.enabled = settings[name]

    # -- calibration ----------------------------------------------------------------------
    def _new_calibrator(self, quantizer: TensorQuantizer) -> Any:
        calibrating = self._calibrating or {}
        calibrator = CALIBRATORS.get(calibrating["method"]).builder
        return calibrator.build(calibrating["options"], quantizer.axis)

    def calibrate(self, batches: Iterable[Any], method: str = "mse", **options: Any) -> None:
        """Set every input quantizer's amax (and both operands' of products of activations)
        from the activations of `batches`, seen unquantized. Weight amax needs no data. Layers
        that see no data are left out.

        Args:
            batches: input tensors or (inputs, targets) pairs.
            method: the calibrator of the data quantizers (`model-explorer list calibrators`):
                `max`, `percentile`, `mse` or `entropy`.
            **options: that calibrator's options, e.g. `percentile=99.9`, `num_bins=1024`,
                `start_bin=64`; one it does not take is an error.
        """
        self._calibrating = {
            "method": method,
            "options": calibrator_options(method, options, "calibrate"),
        }
        for quantizer in self._data_quantizers():
            quantizer.start_calibration(self._new_calibrator(quantizer))
        device = next(self.model.parameters()).device
        seen = 0
        training = self.model.training
        # Calibrate on float activations (weights unquantized too), as modelopt does, so that
        # amax does not depend on the bit widths in place at calibration time.
        self.model.eval()
        try:
            with self.preserved_settings(), torch.no_grad():
                for layer in self.layers.values():
                    if isinstance(layer, TransformedLayer):
                        layer.weight_quantizer.enabled = False
                for batch in batches:
                    data = batch[0] if isinstance(batch, (tuple, list)) else batch
                    run_on(self, to_device(data, device))
                    seen += 1
        finally:
            self._calibrating = None
            self.model.train(training)
            for quantizer in self._data_quantizers():
                quantizer.calibrating = False
        if seen == 0:
            raise UserError("calibration: the calibration data holds no batches")
        self._finish_calibration(method, seen)

    def _finish_calibration(self, method: str, seen: int) -> None:
        unused = [
            name
            for name, layer in self.layers.items()
            if layer.input_quantizer.calibrator.min_value is None
        ]
        self.drop_unused(unused)
        for quantizer in self._data_quantizers():
            if quantizer.calibrator.min_value is None:  # an operand site that never ran
                quantizer.enabled = False
            else:
                self._finish(quantizer, quantizer.calibrator)
        log.info("calibrated %d layers on %d batches (%s)", len(self.layers), seen, method)

    def _data_quantizers(self) -> list[TensorQuantizer]:
        found = [q for layer in self.layers.values() for q in data_quantizers(layer)]
        return found + list(self.operand_quantizers.values())

    def _finish(self, quantizer: TensorQuantizer, calibrator: Any) -> None:
        if self.input_spec.unsigned == "auto":
            quantizer.unsigned = calibrator.min_value is not None and calibrator.min_value >= 0
        quantizer.restore_calibrator(calibrator)

    def layer_signature(self) -> dict[str, dict[str, Any]]:
        """What a calibration file must match: each quantized layer's type and weight shape."""
        return calibration_file.layer_signature(self.layers)

    def save_calibration(
        self, path: str | os.PathLike[str], extra: dict[str, Any] | None = None
    ) -> Path:
        """Write the data quantizers' calibration (amax and histograms) and what discovery
        found, not the model, with `extra` plain data beside it."""
        return calibration_file.save(self, Path(path), extra)

    def load_calibration(
        self, path: str | os.PathLike[str], where: str = "calibration.file"
    ) -> dict[str, Any]:
        """Load a file written by `save_calibration` and return its contents; it must come from
        a model with the same quantized layers (names, types and weight shapes)."""
        return calibration_file.load(self, Path(path), where)

    # -- undo -----------------------------------------------------------------------------
    def restore(self) -> nn.Module:
        """Put the float layers back into the model (and take the quantizers off the layers a
        SparseModel had transformed) and return it."""
        self.interceptor.remove()
        for name, _ in [*self.interceptor.products.values(), *self.interceptor.operands.values()]:
            parent, _, child = name.rpartition(".")
            delattr(self.model.get_submodule(parent) if parent else self.model, child)
        for module in self._attached.values():
            module.set_quantizers()
        for name, module in self._float_layers.items():
            set_child(self.model, name, module)
        return self.model
