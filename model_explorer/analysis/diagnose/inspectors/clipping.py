"""The Clipping inspector: per activation quantizer, a 100-bin histogram of what it reads and
the tails on either side that hold only a few values, as Hailo's Clipping inspector looks at
them, with the range to quantize to instead."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.analysis.diagnose.base import (
    LOW,
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)
from model_explorer.analysis.diagnose.inspectors.common import rounded
from model_explorer.modules import module_hooks, tensors_in

log = logging.getLogger(__name__)

BINS = 100


@register_inspector
class Clipping(BaseInspector):
    """For each per-tensor activation quantizer, the range its float input spans over the
    calibration data (widened to include 0) in a 100-bin histogram; a tail is the run of bins
    at either end that together hold at most 3 values. A tail over 20% of the range is a
    warning when the calibrated amax still covers it: those few values stretch the range and
    every other value loses resolution. The recommendation is that quantizer's amax set by
    hand to the range without the tails (`calibration.amax`, applied at every bit width);
    where calibration already clips the tails (percentile, mse), an info line says so. Smaller
    tails are logged, one info line summarises them."""

    name = "Clipping"
    priority = LOW
    items = 3
    warning_share = 0.20

    def run(self, context: DiagnosisContext) -> list[Finding]:
        model = context.quantized_model
        histograms = activation_histograms(context)
        findings: list[Finding] = []
        for name, (low, high, counts) in histograms.items():
            amax = float(model.quantizers[name].amax.max())
            found = self._judge(name, low, high, counts, amax)
            if found is not None:
                findings.append(found)
        if not findings and histograms:
            findings.append(
                self.finding(
                    "info",
                    f"no activation range stretched by {self.items} or fewer values over more "
                    f"than {self.warning_share:.0%} of it ({len(histograms)} quantizers)",
                )
            )
        return findings

    def _judge(
        self, name: str, low: float, high: float, counts: np.ndarray, amax: float
    ) -> Finding | None:
        left, right = tails(counts, self.items)
        size = (high - low) / BINS
        start = low + size * left if low + size * left < 0 else low
        end = low + size * (BINS - right) if low + size * (BINS - right) > 0 else high
        share = (left + right) / BINS
        suggested = max(abs(start), abs(end))
        evidence = {
            "range": rounded([low, high]),
            "tails": [left / BINS, right / BINS],
            "suggested_range": rounded([start, end]),
            "suggested_amax": round(suggested, 6),
            "amax": round(amax, 6),
        }
        log.debug("Clipping %s: %s", name, evidence)
        if max(left, right) / BINS <= self.warning_share:
            return None
        where = f"[{start:.4g}, {end:.4g}] of [{low:.4g}, {high:.4g}]"
        if amax <= suggested * (1 + 1e-6):
            return self.finding(
                "info",
                f"{share:.0%} of the range holds {self.items} or fewer values; calibration "
                f"already clips it (amax {amax:.4g} within {where})",
                layer=name,
                evidence=evidence,
            )
        return self.finding(
            "warning",
            f"{share:.0%} of the range holds {self.items} or fewer values: the values lie in "
            f"{where}; quantize to amax {suggested:.4g} instead of {amax:.4g}",
            layer=name,
            evidence=evidence,
            recommendation={"calibration": {"amax": {name: float(f"{suggested:.6g}")}}},
        )


def tails(counts: np.ndarray, items: int) -> tuple[int, int]:
    """(bins, bins): how many bins at the low end and at the high end hold together at most
    `items` values (both 0 when the histogram holds no more than `items` in all)."""
    if counts.sum() <= items:
        return 0, 0
    left = int(np.searchsorted(np.cumsum(counts), items, side="right"))
    right = int(np.searchsorted(np.cumsum(counts[::-1]), items, side="right"))
    return left, right


def activation_histograms(context: DiagnosisContext) -> dict[str, tuple[float, float, Any]]:
    """Per per-tensor input quantizer: (low, high, counts), the range of its float input over
    the calibration batches widened to include 0, and a 100-bin histogram of it (two passes:
    the range, then the counts; quantizers off, as calibration sees the data)."""
    model = context.quantized_model
    chosen = [
        (name, quantizer)
        for name, quantizer in model.quantizers.items()
        if name.endswith(".input_quantizer") and quantizer.axis is None and quantizer.enabled
    ]
    ranges: dict[str, list[float]] = {}
    counts: dict[str, Tensor] = {}

    def span(name: str, module: nn.Module, args: Any) -> None:
        values = tensors_in(args)[0].detach().float()
        low, high = ranges.get(name, [0.0, 0.0])
        ranges[name] = [min(low, float(values.min())), max(high, float(values.max()))]

    def count(name: str, module: nn.Module, args: Any) -> None:
        low, high = ranges[name]
        found = torch.histc(tensors_in(args)[0].detach().float(), BINS, low, high).cpu()
        counts[name] = counts[name] + found if name in counts else found

    with model.preserved_settings(), torch.no_grad():
        model.set_enabled(False)
        for hook in (span, count):
            with module_hooks(model, before=hook, modules=chosen, eval_mode=False):
                for (x,) in context.input_batches():
                    model(x)
    return {
        name: (*ranges[name], counts[name].double().numpy())
        for name in ranges
        if ranges[name][1] > ranges[name][0]
    }
