"""The smaller steps as calls: `calibrate(model, loader)` gives the caller's model with its
layers swapped for fake-quantized ones and their ranges calibrated; `quantize(model, plan,
calibration=loader)` also puts a plan (or one bit width everywhere) into effect. Both build
the QuantizedModel a workload's `quantization:` and `calibration:` sections build, with their
names and defaults."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from torch import nn

from model_explorer.api.arguments import seeded
from model_explorer.api.context import check_module
from model_explorer.errors import UserError
from model_explorer.plan import INPUT_BITS, WEIGHT_BITS, apply_plan


def calibrate(
    model: nn.Module,
    calibration: Iterable[Any],
    method: str = "mse",
    quantization: Mapping[str, Any] | None = None,
    seed: int = 0,
    **options: Any,
) -> Any:
    """A QuantizedModel of a copy of `model` (never changed), its input quantizers calibrated.

    Args:
        model: the float model (an `nn.Module`); a deep copy is quantized.
        calibration: batches of inputs, or `(inputs, targets)` pairs, to calibrate on.
        method: the calibrator: `max`, `percentile`, `mse` or `entropy`.
        quantization: `quantization:` settings as a workload writes them (layer types,
            include/exclude, the input and weight quantizers).
        seed: what a shuffling DataLoader's order is drawn from, so that the same call gives
            the same model.
        **options: the calibrator's own options, as the workload's `calibration:` writes them
            beside `method` (`percentile=99.9`, `num_bins=1024`).
    """
    from model_explorer.quantization.model import QuantizedModel
    from model_explorer.quantization.spec import QuantizationSpec

    spec = QuantizationSpec.model_validate(dict(quantization or {}))
    quantized = QuantizedModel.from_spec(copy.deepcopy(check_module(model)).eval(), spec)
    batches = seeded(calibration, seed, "calibrate(calibration=...)")
    if not batches:
        raise UserError("calibration: the iterable given yields no batch; pass one with data")
    quantized.calibrate(batches, method, **options)
    return quantized


def quantize(
    model: nn.Module,
    plan: Mapping[str, Mapping[str, Any]] | int,
    calibration: Iterable[Any],
    method: str = "mse",
    quantization: Mapping[str, Any] | None = None,
    seed: int = 0,
    **options: Any,
) -> Any:
    """`calibrate`, then `plan` in effect: the fake-quantized model of one configuration.

    Args:
        model: the float model (an `nn.Module`); a deep copy is quantized.
        plan: a per-layer plan (`{layer: {input_bits: 8, weight_bits: 4}}`, as a result's
            individuals hold, e.g. `search.plan(individual)`), or one bit width for every
            quantizer.
        calibration: batches of inputs, or `(inputs, targets)` pairs, to calibrate on.
        method: the calibrator: `max`, `percentile`, `mse` or `entropy`.
        quantization: `quantization:` settings as a workload writes them.
        seed: what a shuffling DataLoader's order is drawn from (`calibrate`).
        **options: the calibrator's own options (`percentile=99.9`).
    """
    quantized = calibrate(model, calibration, method, quantization, seed, **options)
    if isinstance(plan, int):
        plan = {name: {INPUT_BITS: plan, WEIGHT_BITS: plan} for name in quantized.layers}
    try:
        apply_plan(plan, quantized=quantized)
    except ValueError as error:
        raise UserError(
            f"plan: {error}; the model's layers are {list(quantized.layers)[:5]}..."
        ) from None
    return quantized
