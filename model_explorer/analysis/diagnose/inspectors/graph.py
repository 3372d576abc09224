"""Inspectors of the model's graph: batch norms left unfused (BatchNorm) and concatenations of
branches with far apart ranges (ConcatenatedOutputs)."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.analysis.diagnose.base import (
    HIGH,
    MEDIUM,
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)
from model_explorer.analysis.diagnose.inspectors.common import (
    BATCH_NORMS,
    CONVOLUTIONS,
    forward_hooks,
    rounded,
)
from model_explorer.modules import module_hooks, tensors_in

log = logging.getLogger(__name__)


@register_inspector
class BatchNorm(BaseInspector):
    """Unfused batch norms that directly follow a convolution: a deployed integer model folds
    them into the convolution, so the explored accuracy and the calibrated ranges are those of
    another model; warning, recommending `model.fold_batchnorm: true`. For convolutions without
    a batch norm after them, per-output-channel weight ranges that differ by more than 8x (the
    mark a folded batch norm leaves) are a warning when the weights are quantized per tensor
    (the narrowest channels lose more than 3 bits; recommend `quantization.weight.axis: 0`),
    otherwise info. The evidence also holds the spread of per-channel pre-activation stds.
    A model trained without batch norms gets Hailo's distribution check (see
    `_without_batch_norms`)."""

    name = "BatchNorm"
    priority = HIGH
    ratio_warning = 8.0

    def run(self, context: DiagnosisContext) -> list[Finding]:
        model = context.float_model
        pairs, spread = _conv_batchnorm_pairs(model, context)
        findings = []
        folded = set()
        for conv, norm in dict.fromkeys(pairs):
            folded.add(conv)
            findings.append(
                self.finding(
                    "warning",
                    f"batch norm '{norm}' follows convolution '{conv}' unfused; an integer "
                    "deployment folds it into the convolution: set model.fold_batchnorm: true",
                    layer=conv,
                    evidence={"batch_norm": norm},
                    recommendation={"model": {"fold_batchnorm": True}},
                )
            )
        per_tensor = context.workload.quantization.weight.axis is None
        for name, module in model.named_modules():
            if not isinstance(module, CONVOLUTIONS) or name in folded or name not in spread:
                continue
            found = self._weight_ranges(name, module, max(spread[name]), per_tensor)
            if found is not None:
                findings.append(found)
        if not _has_batch_norms(context):
            findings += self._without_batch_norms(context)
        if not findings:
            findings.append(self.finding("info", "no batch norm after a convolution"))
        return findings

    def _without_batch_norms(self, context: DiagnosisContext) -> list[Finding]:
        """Hailo's check of a model trained without batch norms: a convolution whose outputs
        (before the activation) have more than 5% of channels with a mean beyond +-5 or a
        std above 3 is an outlier; any outlier is a warning each and an error advising to
        retrain with batch norms."""
        stats = _output_channel_stats(context)
        findings = []
        for name, (mean, std) in stats.items():
            shares = (float((mean.abs() > 5).double().mean()), float((std > 3).double().mean()))
            log.debug("BatchNorm %s: channel mean/std outlier shares %s", name, shares)
            if max(shares) > 0.05:
                findings.append(
                    self.finding(
                        "warning",
                        f"outputs far from normalized: {shares[0]:.0%} of channels with |mean| "
                        f"> 5, {shares[1]:.0%} with std > 3 (a model without batch norms?)",
                        layer=name,
                        evidence={
                            "mean_share": round(shares[0], 4),
                            "std_share": round(shares[1], 4),
                            "largest_mean": round(float(mean.abs().max()), 4),
                            "largest_std": round(float(std.max()), 4),
                        },
                    )
                )
        if findings:
            outliers = [f.layer for f in findings]
            findings.append(
                self.finding(
                    "error",
                    f"the model has no batch norms and {len(outliers)} layers' outputs are "
                    "abnormally distributed: it was likely trained without batch norms, or its "
                    "inputs are not distributed as in training; consider retraining the model "
                    "with batch norms after its convolutions",
                    evidence={"outliers": outliers},
                )
            )
        return findings

    def _weight_ranges(
        self, name: str, module: nn.Module, std_ratio: float, per_tensor: bool
    ) -> Finding | None:
        """A finding when the convolution's per-channel weight ranges differ by more than 8x."""
        ranges = module.weight.detach().abs().reshape(module.weight.shape[0], -1).amax(1)
        ranges = ranges[ranges > 0]
        if len(ranges) < 2:
            return None
        ratio = float(ranges.max() / ranges.min())
        if ratio <= self.ratio_warning:
            return None
        evidence = {
            "weight_range_ratio": round(ratio, 2),
            "preactivation_std_ratio": round(std_ratio, 2),
        }
        if per_tensor:
            return self.finding(
                "warning",
                f"per-channel weight ranges differ by {ratio:.0f}x, as after folding a "
                f"batch norm; per-tensor weights lose {math.log2(ratio):.1f} bits on the "
                "narrowest channels: quantize weights per channel (axis 0)",
                layer=name,
                evidence=evidence,
                recommendation={"quantization": {"weight": {"axis": 0}}},
            )
        return self.finding(
            "info",
            f"per-channel weight ranges differ by {ratio:.0f}x (a folded batch norm?); "
            "per-channel weight quantization already covers it",
            layer=name,
            evidence=evidence,
        )


def _has_batch_norms(context: DiagnosisContext) -> bool:
    """Whether the model as trained has batch norms (before `model.fold_batchnorm` folds
    them)."""
    model = context.float_model
    if context.workload.model.fold_batchnorm:
        model = context.context.build_model(fold=False)
    return any(isinstance(m, BATCH_NORMS) for m in model.modules())


def _output_channel_stats(context: DiagnosisContext) -> dict[str, tuple[Tensor, Tensor]]:
    """Per convolution (Hailo's: not the linear layers, whose last gives the logits), each
    output channel's mean and std over the
    calibration batches (per batch over samples and positions; the means averaged, the stds
    as the root of the mean variance)."""
    sums: dict[str, list[Tensor]] = {}

    def record(name: str, module: nn.Module, args: Any, output: Any) -> None:
        if not isinstance(module, CONVOLUTIONS) or not isinstance(output, Tensor):
            return
        channels = output.detach().double().transpose(0, 1).reshape(output.shape[1], -1)
        found = sums.setdefault(name, [])
        found.append(torch.stack([channels.mean(1), channels.var(1, unbiased=False)]))

    with torch.no_grad(), forward_hooks(context.float_model, record):
        for (x,) in context.input_batches():
            context.float_model(x)
    result = {}
    for name, batches in sums.items():
        mean, variance = torch.stack(batches).mean(0)
        result[name] = (mean, variance.sqrt())
    return result


def _conv_batchnorm_pairs(
    model: nn.Module, context: DiagnosisContext
) -> tuple[list[tuple[str, str]], dict[str, list[float]]]:
    """(convolution, batch norm) pairs where the norm reads the convolution's output, and per
    convolution the ratio of its largest to smallest per-channel output std, per batch."""
    produced: dict[int, str] = {}
    pairs: list[tuple[str, str]] = []
    spread: dict[str, list[float]] = {}

    def record(name: str, module: nn.Module, args: Any, output: Any) -> None:
        inputs = tensors_in(args)
        if isinstance(module, BATCH_NORMS) and inputs and id(inputs[0]) in produced:
            pairs.append((produced[id(inputs[0])], name))
        if isinstance(module, CONVOLUTIONS) and isinstance(output, Tensor):
            produced[id(output)] = name
            stds = output.detach().transpose(0, 1).reshape(output.shape[1], -1).std(1)
            spread.setdefault(name, []).append(float(stds.max() / stds.min().clamp_min(1e-12)))

    with torch.no_grad(), forward_hooks(model, record):
        for (x,) in context.input_batches():
            produced.clear()
            model(x)
    return pairs, spread


class _Concatenations:
    """Hook object for HookRunner: the largest |value| of each input of every concatenation."""

    def __init__(self) -> None:
        self.ranges: dict[str, list[float]] = {}
        self.first: dict[str, np.ndarray] = {}  # each one's output on the first batch

    def ConcatenationPost(self, name: str, inputs: list[dict], output: dict) -> None:  # noqa: N802
        self.first.setdefault(name, output["data"])
        amax = [float(np.abs(t["data"]).max()) if t["data"].size else 0.0 for t in inputs]
        known = self.ranges.get(name)
        if known is not None:
            amax = [max(a, b) for a, b in zip(known, amax, strict=True)]
        self.ranges[name] = amax


def _readers(context: DiagnosisContext, outputs: dict[str, np.ndarray]) -> dict[str, list]:
    """Per concatenation, the quantized layers that read it (on the first batch: the layer
    inputs holding its values, through views such as a flatten), and `output` where the
    model puts it out."""
    model = context.float_model
    layers = [(n, model.get_submodule(n)) for n in context.quantized_model.layers]
    found: dict[str, list[str]] = {}

    def matching(given: Tensor) -> list[str]:
        flat = given.detach().cpu().numpy().reshape(-1)
        return [
            concat
            for concat, data in outputs.items()
            if data.size == flat.size and np.array_equal(data.reshape(-1), flat)
        ]

    def seen(name: str, module: nn.Module, args: Any) -> None:
        for concat in matching(tensors_in(args)[0]):
            found.setdefault(concat, []).append(name)

    first = next(iter(context.input_batches()))
    with torch.no_grad(), module_hooks(model, before=seen, modules=layers):
        result = model(*first)
    for output in tensors_in(result):
        for concat in matching(output):
            found.setdefault(concat, []).append("output")
    return found


@register_inspector
class ConcatenatedOutputs(BaseInspector):
    """Concatenations (torch.cat anywhere in the forward pass, found at the operator level)
    whose inputs' ranges differ by more than 8x: the tensor they form is quantized with one
    scale, so the narrowest branch loses log2(ratio) bits; warning, suggesting to rescale the
    branches (e.g. a normalization per branch) and recommending the layers that quantize it
    at least log2(ratio) more input bits than the lowest explored (`problem.layer_bounds`); a
    concatenation the model puts out (Hailo's case) is advised to be put out as its inputs."""

    name = "ConcatenatedOutputs"
    priority = MEDIUM
    ratio_warning = 8.0

    def run(self, context: DiagnosisContext) -> list[Finding]:
        from model_explorer.analysis.hooks import HookRunner

        watcher = _Concatenations()
        HookRunner(context.float_model, watcher).run(context.input_batches())
        readers = _readers(context, watcher.first)
        findings = []
        for name, ranges in watcher.ranges.items():
            positive = [r for r in ranges if r > 0]
            if len(positive) < 2:
                continue
            ratio = max(positive) / min(positive)
            if ratio > self.ratio_warning:
                findings.append(self._finding(context, name, ranges, ratio, readers.get(name)))
        return findings

    def _finding(
        self, context: DiagnosisContext, name: str, ranges: list, ratio: float, readers: Any
    ) -> Finding:
        """The warning for one concatenation: the layers that quantize it (`readers`) given
        the lost bits more as their lowest input bits; a model output said to be one."""
        lost = math.log2(ratio)
        evidence = {"ranges": rounded(ranges), "ratio": round(ratio, 2)}
        head = (
            f"concatenates branches with ranges {rounded(ranges, 3)} ({ratio:.0f}x apart): "
            f"one scale for all costs the narrowest {lost:.1f} bits"
        )
        if readers and "output" in readers:  # Hailo's case: a concatenation put out
            head += "; it is a model output: put out its inputs separately instead"
        readers = [r for r in readers or [] if r != "output"]
        if not readers:
            return self.finding("warning", f"{head}", layer=name, evidence=evidence)
        low, high = context.bit_range
        bits = min(high, low + math.ceil(lost))
        evidence["readers"] = readers
        return self.finding(
            "warning",
            f"{head}; rescale the branches, or give {', '.join(readers)} at least {bits} input "
            "bits",
            layer=name,
            evidence=evidence,
            recommendation={
                "problem": {"layer_bounds": {f"{r}.input_quantizer": [bits, high] for r in readers}}
            },
        )
