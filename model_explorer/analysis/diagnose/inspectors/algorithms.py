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
from model_explorer.datasets.base import DATASETS, SampleStream
from model_explorer.modules import module_hooks, tensors_in

log = logging.getLogger(__name__)

HAILO_CALIBRATION = 64  # Hailo's default calibration set size
HAILO_FINETUNE = 1024  # the samples Hailo asks for before its post-quantization algorithms


def available_samples(context: DiagnosisContext, role: str) -> int | None:
    """How many samples the dataset of `role` holds before its sample_limit (None: a stream
    of unknown length)."""
    spec, where = context.context.dataset(role)
    dataset = DATASETS.resolve(spec.type, f"{where}.type")(spec, where)
    return None if isinstance(dataset, SampleStream) else len(dataset)


@register_inspector
class PreQuantAlgo(BaseInspector):
    """The calibration set against Hailo's default of 64 samples: fewer is a warning (the
    ranges rest on few samples; recommends `sample_limit: 64` where the data holds that many),
    more is info (a bigger set only refines the statistics, as Hailo says). And against the
    method: with `percentile` p, a per-tensor input quantizer that sees fewer than
    1 / (1 - p/100) values over the calibration set gets the maximum as its percentile, so the
    method is `max` in all but name: a warning naming those quantizers, recommending the
    samples that reach it (or `method: max` where the data cannot)."""

    name = "PreQuantAlgo"
    priority = LOW

    def run(self, context: DiagnosisContext) -> list[Finding]:
        spec = context.workload.require("calibration")
        samples = context.context.batches("calibrate").num_samples
        available = available_samples(context, "calibrate")
        findings = []
        if samples < HAILO_CALIBRATION:
            reachable = available is None or available >= HAILO_CALIBRATION
            advice = (
                f"calibrate on {HAILO_CALIBRATION} or more"
                if reachable
                else f"the data holds only {available}; give it more samples"
            )
            findings.append(
                self.finding(
                    "warning",
                    f"calibration uses {samples} samples, fewer than Hailo's default of "
                    f"{HAILO_CALIBRATION}: the ranges rest on few samples; {advice}",
                    evidence={"samples": samples, "available": available},
                    recommendation=_calibration_limit(HAILO_CALIBRATION) if reachable else None,
                )
            )
        else:
            findings.append(
                self.finding(
                    "info",
                    f"calibration uses {samples} samples (Hailo's default {HAILO_CALIBRATION}; "
                    "more only refines the statistics)",
                    evidence={"samples": samples},
                )
            )
        if spec.method == "percentile":
            findings += self._percentile(context, spec.options.percentile, samples, available)
        return findings

    def _percentile(
        self, context: DiagnosisContext, percentile: float, samples: int, available: Any
    ) -> list[Finding]:
        needed = math.ceil(1 / (1 - percentile / 100)) if percentile < 100 else math.inf
        per_sample = _values_per_sample(context)
        short = {n: v * samples for n, v in per_sample.items() if v * samples < needed}
        log.debug("PreQuantAlgo: values per sample %s, needed %s", per_sample, needed)
        if not short:
            return []
        least = min(per_sample[n] for n in short)
        wanted = math.ceil(needed / least) if math.isfinite(needed) else None
        reachable = wanted is not None and (available is None or wanted <= available)
        if reachable:
            advice, recommendation = f"calibrate on {wanted} samples", _calibration_limit(wanted)
        else:
            advice, recommendation = "use method max", {"calibration": {"method": "max"}}
        return [
            self.finding(
                "warning",
                f"{len(short)} quantizers see fewer than the {needed:,} values a "
                f"{percentile}th percentile needs ({_names(short)}): their percentile is the "
                f"maximum; {advice}",
                evidence={"values": short, "needed": needed},
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


def _values_per_sample(context: DiagnosisContext) -> dict[str, int]:
    """The values each per-tensor input quantizer reads per sample (one batch's inputs)."""
    model = context.quantized_model
    chosen = [
        (name, quantizer)
        for name, quantizer in model.quantizers.items()
        if name.endswith(".input_quantizer") and quantizer.axis is None
    ]
    found: dict[str, int] = {}

    def seen(name: str, module: nn.Module, args: Any) -> None:
        values = tensors_in(args)[0]
        found.setdefault(name, values.numel() // max(len(values), 1))

    x = context.inputs[0].to(context.device)
    with model.preserved_settings(), torch.no_grad():
        model.set_enabled(False)
        with module_hooks(model, before=seen, modules=chosen, eval_mode=False):
            model(x)
    return found


@register_inspector
class PostQuantAlgo(BaseInspector):
    """This project's post-quantization algorithm is fine-tuning (`retraining:`; `retrain`
    fine-tunes a search's individuals). Info on what is configured; a training set of fewer
    than 1024 samples is a warning (Hailo asks for 1024 or more before its fine-tuning and
    bias correction), recommending `retraining.datasets.train.sample_limit: 1024` where the
    data holds that many; no `retraining:` section is info."""

    name = "PostQuantAlgo"
    priority = LOW

    def run(self, context: DiagnosisContext) -> list[Finding]:
        spec = context.workload.retraining
        if spec is None:
            return [
                self.finding(
                    "info",
                    "no post-quantization fine-tuning configured (add retraining: to fine-tune "
                    "a search's individuals with `model-explorer retrain`)",
                )
            ]
        available = available_samples(context, "train")
        limit = spec.datasets.train.sample_limit
        samples = limit if available is None else min(limit or available, available)
        evidence = {"epochs": spec.epochs, "samples": samples, "available": available}
        if samples is None or samples >= HAILO_FINETUNE:
            return [
                self.finding(
                    "info",
                    f"fine-tuning: {spec.epochs} epochs on {samples or 'every'} samples",
                    evidence=evidence,
                )
            ]
        reachable = available is None or available >= HAILO_FINETUNE
        recommendation = (
            {"retraining": {"datasets": {"train": {"sample_limit": HAILO_FINETUNE}}}}
            if reachable
            else None
        )
        advice = f"train on {HAILO_FINETUNE} or more" if reachable else "the data holds no more"
        return [
            self.finding(
                "warning",
                f"fine-tuning trains on {samples} samples, fewer than the {HAILO_FINETUNE} Hailo "
                f"asks for before its post-quantization algorithms: it may overfit; {advice}",
                evidence=evidence,
                recommendation=recommendation,
            )
        ]
