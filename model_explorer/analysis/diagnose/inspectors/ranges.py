"""Inspector of the quantized ranges: layers whose quantization error stands out
(HighPrecision). (Outliers stretching a range: clipping.py.)"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from model_explorer.analysis.debug.errors import layer_io
from model_explorer.analysis.diagnose.base import (
    MEDIUM,
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)


@register_inspector
class HighPrecision(BaseInspector):
    """Per layer, the quantization error at the workload's configured bit widths
    (`quantization.input/weight.num_bits`) with every other layer in float: the SQNR
    20 log10(|y| / |y - y_q|) of the layer's output, computed per output channel and averaged
    in dB (so channels drowned by a few wide ones count). A layer more than 10 dB below the
    median of all layers is a warning, more than 20 dB an error; the recommendation raises its
    lower explored bit bound by the missing dB / 6.02 bits (one bit is worth 6.02 dB)."""

    name = "HighPrecision"
    priority = MEDIUM
    warning_db, error_db = 10.0, 20.0

    def run(self, context: DiagnosisContext) -> list[Finding]:
        table = layer_sqnr(context)
        context.cache["sqnr"] = table
        if not table:
            return []
        median = float(np.median(list(table.values())))
        low, high = context.bit_range
        at = _bits_label(context.quantized_model.bit_widths)
        ranked = sorted(table.items(), key=lambda item: item[1])
        findings = []
        for rank, (layer, sqnr) in enumerate(ranked, 1):
            gap = median - sqnr
            evidence = {"sqnr_db": round(sqnr, 2), "median_db": round(median, 2), "rank": rank}
            if gap > self.warning_db:
                bits = min(high, low + math.ceil(gap / 6.02))
                findings.append(
                    self.finding(
                        "error" if gap > self.error_db else "warning",
                        f"SQNR {sqnr:.1f} dB at {at} bits, {gap:.1f} dB below the median "
                        f"layer ({median:.1f} dB): give it at least {bits} bits",
                        layer=layer,
                        evidence=evidence,
                        recommendation={
                            "problem": {
                                "layer_bounds": {
                                    f"{layer}.{role}_quantizer": [bits, high]
                                    for role in ("input", "weight")
                                }
                            }
                        },
                    )
                )
        if not findings:
            findings.append(
                self.finding(
                    "info",
                    f"per-layer SQNR at {at} bits: {ranked[0][1]:.1f} dB ({ranked[0][0]}) to "
                    f"{ranked[-1][1]:.1f} dB, median {median:.1f} dB",
                    evidence={"sqnr_db": {k: round(v, 2) for k, v in table.items()}},
                )
            )
        return findings


def channel_powers(reference: Tensor, quantized: Tensor) -> tuple[Tensor, Tensor]:
    """Per output channel (dim 1): the signal power of `reference` and the noise power of
    `quantized` against it, summed over every other dimension."""
    y = reference.double().transpose(0, 1).reshape(reference.shape[1], -1)
    noise = (quantized.double().transpose(0, 1).reshape(reference.shape[1], -1) - y).pow(2).sum(1)
    return y.pow(2).sum(1), noise


def channel_db(signal: Tensor, noise: Tensor, cap_db: float = 100.0) -> float:
    """Mean over channels of 10 log10(signal / noise), in dB; channels without signal are
    skipped, a noiseless channel counts as `cap_db`."""
    keep = signal > 0
    if not keep.any():
        return cap_db
    ratio = signal[keep] / noise[keep].clamp_min(signal[keep] * 10 ** (-cap_db / 10))
    return float((10 * torch.log10(ratio)).mean())


def channel_sqnr(reference: Tensor, quantized: Tensor, cap_db: float = 100.0) -> float:
    """Mean over output channels (dim 1) of 10 log10(signal power / noise power), in dB;
    channels without signal are skipped, a noiseless channel counts as `cap_db`."""
    return channel_db(*channel_powers(reference, quantized), cap_db)


def _bits_label(bits: list[int]) -> str:
    return str(bits[0]) if len(set(bits)) == 1 else f"{min(bits)}-{max(bits)}"


def layer_sqnr(context: DiagnosisContext) -> dict[str, float]:
    """SQNR (dB) of each quantized layer's output with only that layer quantized (at the
    model's current bit widths): per batch, one float forward keeps every layer's input,
    and each layer is called alone on it with its own quantizers on, so the cost is one
    forward per batch rather than one per layer (a hundred on EfficientNet)."""
    model = context.quantized_model
    powers: dict[str, list[Tensor]] = {}
    with model.preserved_settings(), torch.no_grad():
        for (x,) in context.input_batches():
            model.set_enabled(False)
            floats, _ = layer_io(model, dict(model.layers), x)
            for name, layer in model.layers.items():
                for x_float, y_float, rest in floats.get(name, []):  # every call of the layer
                    quantizers = [f"{name}.input_quantizer", f"{name}.weight_quantizer"]
                    model.set_enabled(True, quantizers)
                    # through the layer's own forward: a subclass's (TensorFlow's SAME padding)
                    # pads first
                    found = channel_powers(y_float, layer(x_float, *rest))
                    model.set_enabled(False)
                    sums = powers.setdefault(name, [torch.zeros_like(p) for p in found])
                    for total, part in zip(sums, found, strict=True):
                        total += part
    return {name: channel_db(*sums) for name, sums in powers.items()}
