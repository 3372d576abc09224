"""Inspectors of the algorithms around quantization, as Hailo's pre- and post-quantization
algorithm inspectors: the calibration set against the calibration method (PreQuantAlgo), the
fine-tuning set (PostQuantAlgo)."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from torch import nn

from model_explorer.analysis.diagnose.base import (
    LOW,
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)
from model_explorer.datasets.spec import DATASETS
from model_explorer.modules import module_hooks, tensors_in
from model_explorer.quantization.model import data_quantizers

log = logging.getLogger(__name__)

HAILO_CALIBRATION = 64  # Hailo's default calibration set size
HAILO_FINETUNE = 1024  # the samples Hailo asks for before its post-quantization algorithms


def available_samples(context: DiagnosisContext, role: str) -> int | None:
    """How many samples the dataset of `role` holds before its sample_limit (a stream: the
    length it declares; None: a dataset of the user's without a length)."""
    spec, where = context.context.dataset(role)
    dataset = DATASETS.resolve(spec.type, f"{where}.type")(spec, where)
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return None


def needed_values(percentile: float) -> float:
    """The fewest values whose `percentile`th percentile (the calibrator's rule: the first
    histogram bin where the cumulative share reaches it) can lie below their maximum: n values
    put the second largest at the share (n - 1) / n, which reaches p / 100 from
    n = 1 / (1 - p / 100) on (rounded to absorb the float error of 1 - p / 100)."""
    if percentile >= 100:
        return math.inf
    return math.ceil(round(1 / (1 - percentile / 100), 6))


@register_inspector
class PreQuantAlgo(BaseInspector):
    """The calibration set, as Hailo's pre-quantization algorithm inspector checks it.

    Its size (the samples `calibrate` runs on: the calibrate dataset after its sample_limit)
    against Hailo's default of 64: fewer is a warning here (Hailo says info: its own flow
    calibrates on 64 by default, this one on whatever the workload gives, and few samples
    leave every input quantizer's range to chance), recommending `sample_limit: 64` where the
    data holds that many; 64 or more is info (a bigger set only refines the statistics, as
    Hailo says; calibration costs one forward per batch).

    Against the method: with `method: percentile` and percentile p, a per-tensor input
    quantizer that sees fewer than 1 / (1 - p/100) values over the whole calibration set
    (samples x the values it reads per sample, counted on one batch) gets its maximum as its
    percentile, so the method is `max` in all but name: a warning naming those quantizers,
    recommending the samples that give every one of them enough values (rounded up, 64 at
    least), or `method: max` where the data does not hold that many. mse and entropy have no
    such threshold and are not checked."""

    name = "PreQuantAlgo"
    priority = LOW

    def run(self, context: DiagnosisContext) -> list[Finding]:
        spec = context.workload.require("calibration")
        samples = context.context.batches("calibrate").num_samples
        available = available_samples(context, "calibrate")
        log.debug("PreQuantAlgo: %d calibration samples of %s", samples, available)
        findings = [self._size(samples, available)]
        if spec.method == "percentile":
            findings += self._percentile(context, spec.options.percentile, samples, available)
        return findings

    def _size(self, samples: int, available: int | None) -> Finding:
        evidence = {"samples": samples, "available": available}
        if samples >= HAILO_CALIBRATION:
            return self.finding(
                "info",
                f"calibration uses {samples} samples (Hailo's default {HAILO_CALIBRATION}; "
                "more only refines the statistics)",
                evidence=evidence,
            )
        reachable = available is None or available >= HAILO_CALIBRATION
        advice = (
            f"calibrate on {HAILO_CALIBRATION} or more"
            if reachable
            else f"the data holds only {available}; give it more samples"
        )
        return self.finding(
            "warning",
            f"calibration uses {samples} samples, fewer than Hailo's default of "
            f"{HAILO_CALIBRATION}: the ranges rest on few samples; {advice}",
            evidence=evidence,
            recommendation=_calibration_limit(HAILO_CALIBRATION) if reachable else None,
        )

    def _percentile(
        self, context: DiagnosisContext, percentile: float, samples: int, available: int | None
    ) -> list[Finding]:
        needed = needed_values(percentile)
        if not math.isfinite(needed):
            return []  # the 100th percentile is the maximum by definition
        per_sample = values_per_sample(context)
        for name, values in per_sample.items():
            log.debug(
                "PreQuantAlgo %s: %d values per sample, %d in all", name, values, values * samples
            )
        short = {n: v * samples for n, v in per_sample.items() if v * samples < needed}
        if not short:
            return []
        wanted = max(math.ceil(needed / min(per_sample[n] for n in short)), HAILO_CALIBRATION)
        if available is None or wanted <= available:
            advice, recommendation = f"calibrate on {wanted} samples", _calibration_limit(wanted)
        else:
            advice = f"the data holds only {available} samples of the {wanted} needed; use max"
            recommendation = {"calibration": {"method": "max"}}
        return [
            self.finding(
                "warning",
                f"{len(short)} quantizers see fewer than the {needed:,} values a "
                f"{percentile}th percentile needs ({_names(short)}): their percentile is the "
                f"maximum; {advice}",
                evidence={"values": short, "needed": needed, "samples_needed": wanted},
                recommendation=recommendation,
            )
        ]


def _calibration_limit(samples: int) -> dict[str, Any]:
    return {"calibration": {"datasets": {"calibrate": {"sample_limit": samples}}}}


def _names(values: dict[str, Any], shown: int = 4) -> str:
    names = list(values)
    return ", ".join(names[:shown]) + (
        f", ... {len(names) - shown} more" if len(names) > shown else ""
    )


def values_per_sample(context: DiagnosisContext) -> dict[str, int]:
    """The values each per-tensor data quantizer (a layer's input's; both operands' of a
    product of activations) reads per sample: everything it reads in a forward of one
    calibration batch (every call of a layer used twice), over the batch's samples."""
    model = context.quantized_model
    data = {id(q) for layer in model.layers.values() for q in data_quantizers(layer)}
    chosen = [
        (name, quantizer)
        for name, quantizer in model.quantizers.items()
        if id(quantizer) in data and getattr(quantizer, "axis", None) is None
    ]
    found: dict[str, int] = {}

    def seen(name: str, module: nn.Module, args: Any) -> None:
        found[name] = found.get(name, 0) + sum(t.numel() for t in tensors_in(args))

    x = context.inputs[0].to(context.device)
    with model.preserved_settings(), torch.no_grad():
        model.set_enabled(False)
        with module_hooks(model, before=seen, modules=chosen, eval_mode=False):
            model(x)
    return {name: total // len(x) for name, total in found.items()}


@register_inspector
class PostQuantAlgo(BaseInspector):
    """The post-quantization algorithm, as Hailo's post-quantization algorithm inspector
    reports its own. Hailo's are bias correction and quantization-aware fine-tuning; this
    project has one: `model-explorer retrain` fine-tunes chosen individuals of a search,
    each built afresh from the float baseline and the calibration, its quantizers passing
    gradients straight through (`retraining:`, whose train set also trains the float baseline
    with `retrain --baseline`). The search itself never fine-tunes.

    No `retraining:` section is info: no post-quantization algorithm. Otherwise info on what
    is configured (epochs, train samples: the train dataset after its sample_limit), and a
    warning when the train set holds fewer than 1024 samples, the number Hailo asks for
    before its fine-tuning and bias correction: with fewer, a few epochs fit the quantized
    model to those samples. It recommends `retraining.datasets.train.sample_limit: 1024`
    where the data holds that many, else the most it holds."""

    name = "PostQuantAlgo"
    priority = LOW

    def run(self, context: DiagnosisContext) -> list[Finding]:
        spec = context.workload.retraining
        if spec is None:
            return [
                self.finding(
                    "info",
                    "no post-quantization algorithm configured: add retraining: to fine-tune a "
                    "search's individuals with `model-explorer retrain`",
                )
            ]
        available = available_samples(context, "train")
        limit = spec.datasets.train.sample_limit
        samples = limit if available is None else min(limit or available, available)
        evidence = {"epochs": spec.epochs, "samples": samples, "available": available}
        log.debug("PostQuantAlgo: retraining %s", evidence)
        if samples is None or samples >= HAILO_FINETUNE:
            return [
                self.finding(
                    "info",
                    f"fine-tuning (retrain): {spec.epochs} epochs on {samples or 'every'} samples",
                    evidence=evidence,
                )
            ]
        target = HAILO_FINETUNE if available is None else min(HAILO_FINETUNE, available)
        if target > samples:
            advice = f"train on {target} samples"
            if target < HAILO_FINETUNE:
                advice += ", all the data holds"
            recommendation = {"retraining": {"datasets": {"train": {"sample_limit": target}}}}
        else:
            advice, recommendation = "the data holds no more; give it more samples", None
        return [
            self.finding(
                "warning",
                f"fine-tuning (retrain) trains on {samples} samples, fewer than the "
                f"{HAILO_FINETUNE} Hailo asks for before its post-quantization algorithms: "
                f"it may fit the quantized model to them; {advice}",
                evidence=evidence,
                recommendation=recommendation,
            )
        ]
