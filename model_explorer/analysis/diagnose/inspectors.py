"""The shipped inspectors. Each class documents what it checks and its thresholds; the README
lists them in the same words."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.analysis.diagnose.base import (
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)
from model_explorer.modules import tensors_in
from model_explorer.quantization.sensitivity import SensitivityTable, layer_sensitivity

NORMALIZATIONS = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
)
CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def _round(values: Any, digits: int = 4) -> Any:
    if isinstance(values, (list, tuple, np.ndarray)):
        return [_round(v, digits) for v in values]
    return round(float(values), digits)


@contextmanager
def _forward_hooks(model: nn.Module, hook: Any, leaves_only: bool = True) -> Iterator[None]:
    handles = [
        module.register_forward_hook(hook(name))
        for name, module in model.named_modules()
        if name and (not leaves_only or not list(module.children()))
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@register_inspector
class Norm(BaseInspector):
    """Is the model's input normalized? Measures each input channel's mean and standard
    deviation over the calibration data. Unless the model's first layer is a normalization, a
    channel with |mean| > 0.25 or a std outside [0.5, 2] is a warning (pixels scaled to [0, 1]
    land there), |mean| > 3 or a std above 10 or below 0.05 an error (raw 0-255 pixels)."""

    name = "Norm"
    warn_mean, warn_std = 0.25, (0.5, 2.0)
    error_mean, error_std = 3.0, (0.05, 10.0)

    def run(self, context: DiagnosisContext) -> list[Finding]:
        x = torch.cat([x.detach().double().cpu() for x in context.inputs])
        channels = x.transpose(0, 1).reshape(x.shape[1], -1) if x.dim() > 1 else x[None]
        mean = channels.mean(1).tolist()
        std = channels.std(1).tolist()
        evidence = {"mean": _round(mean), "std": _round(std)}
        first = _first_leaf(context.float_model, context.inputs[0].to(context.device))
        if isinstance(first, NORMALIZATIONS):
            return [
                self.finding(
                    "info",
                    f"the model starts with {type(first).__name__}; input mean "
                    f"{evidence['mean']}, std {evidence['std']}",
                    evidence=evidence,
                )
            ]
        severity = "info"
        for m, s in zip(mean, std, strict=True):
            if abs(m) > self.error_mean or not self.error_std[0] <= s <= self.error_std[1]:
                severity = "error"
            elif severity == "info" and (
                abs(m) > self.warn_mean or not self.warn_std[0] <= s <= self.warn_std[1]
            ):
                severity = "warning"
        message = f"input channel means {evidence['mean']}, stds {evidence['std']}"
        if severity != "info":
            message += (
                "; the inputs are not normalized: standardize them per channel (mean 0, std 1) "
                "in the dataset or put a normalization at the model's start, then retrain"
            )
        return [self.finding(severity, message, evidence=evidence)]


def _first_leaf(model: nn.Module, x: Tensor) -> nn.Module | None:
    order: list[nn.Module] = []

    def hook(name: str):  # noqa: ANN202
        def record(module: nn.Module, args: Any, output: Any) -> None:
            order.append(module)

        return record

    with torch.no_grad(), _forward_hooks(model, hook):
        model(x[:1])
    return order[0] if order else None


@register_inspector
class Clipping(BaseInspector):
    """For each per-tensor quantizer (activations, and weights quantized per tensor), the share
    of its calibrated range [0, amax] that holds only the three largest magnitudes, i.e. lies
    above the fourth largest |value| of the calibration data. Above 5% is a warning, above 20%
    an error: a few outliers stretch the range and every other value loses resolution. The
    recommendation is a calibration method that clips them (percentile, or mse for errors)."""

    name = "Clipping"
    warning, error = 0.05, 0.20

    def run(self, context: DiagnosisContext) -> list[Finding]:
        model = context.quantized_model
        top = _largest_magnitudes(context, 4)
        method = context.workload.calibration.method if context.workload.calibration else None
        findings = []
        shares: dict[str, float] = {}
        for name, quantizer in model.quantizers.items():
            if quantizer.axis is not None or quantizer.amax is None or name not in top:
                continue
            amax = float(quantizer.amax.max())
            magnitudes = top[name]
            if amax <= 0 or len(magnitudes) < 4:
                continue
            share = (amax - min(magnitudes[3], amax)) / amax
            shares[name] = share
            evidence = {"amax": amax, "largest": _round(magnitudes), "share": round(share, 4)}
            if share > self.warning:
                severity = "error" if share > self.error else "warning"
                better = "mse" if severity == "error" or method == "percentile" else "percentile"
                findings.append(
                    self.finding(
                        severity,
                        f"{share:.0%} of the calibrated range (amax {amax:.4g}) holds only the "
                        f"3 largest values {evidence['largest'][:3]}; calibrate with "
                        f"'{better}' to clip them",
                        layer=name,
                        evidence=evidence,
                        recommendation={"calibration": {"method": better}},
                    )
                )
        if not findings and shares:
            worst = max(shares, key=shares.get)
            findings.append(
                self.finding(
                    "info",
                    f"no range dominated by outliers; largest share {shares[worst]:.1%} ({worst})",
                    evidence={"share": {k: round(v, 4) for k, v in shares.items()}},
                )
            )
        return findings


def _largest_magnitudes(context: DiagnosisContext, count: int) -> dict[str, list[float]]:
    """The `count` largest |values| each quantizer sees over the calibration inputs, the
    activations taken from the float model (quantizers off), as calibration sees them."""
    model = context.quantized_model
    found: dict[str, Tensor] = {}
    handles = []

    def keep(name: str, values: Tensor) -> None:
        flat = values.detach().abs().reshape(-1).float()
        if name in found:
            flat = torch.cat([found[name], flat])
        found[name] = flat.topk(min(count, flat.numel())).values

    for name, quantizer in model.quantizers.items():
        if name.endswith("weight_quantizer"):
            layer = model.model.get_submodule(name.rpartition(".")[0])
            keep(name, layer.weight)
        else:

            def pre(module: nn.Module, args: Any, name: str = name) -> None:
                keep(name, tensors_in(args)[0])

            handles.append(quantizer.register_forward_pre_hook(pre))
    try:
        with model.preserved_settings(), torch.no_grad():
            model.set_enabled(False)
            for (x,) in context.input_batches():
                model(x)
    finally:
        for handle in handles:
            handle.remove()
    return {name: values.tolist() for name, values in found.items()}


@register_inspector
class BatchNorm(BaseInspector):
    """Unfused batch norms that directly follow a convolution: a deployed integer model folds
    them into the convolution, so the explored accuracy and the calibrated ranges are those of
    another model; warning, recommending `model.fold_batchnorm: true`. For convolutions without
    a batch norm after them, per-output-channel weight ranges that differ by more than 8x (the
    mark a folded batch norm leaves) are a warning when the weights are quantized per tensor
    (the narrowest channels lose more than 3 bits; recommend `quantization.weight.axis: 0`),
    otherwise info. The evidence also holds the spread of per-channel pre-activation stds."""

    name = "BatchNorm"
    ratio_warning = 8.0

    def run(self, context: DiagnosisContext) -> list[Finding]:
        model = context.float_model
        produced: dict[int, str] = {}
        pairs: list[tuple[str, str]] = []
        spread: dict[str, list[float]] = {}

        def hook(name: str):  # noqa: ANN202
            def record(module: nn.Module, args: Any, output: Any) -> None:
                inputs = tensors_in(args)
                if isinstance(module, BATCH_NORMS) and inputs and id(inputs[0]) in produced:
                    pairs.append((produced[id(inputs[0])], name))
                if isinstance(module, CONVOLUTIONS) and isinstance(output, Tensor):
                    produced[id(output)] = name
                    stds = output.detach().transpose(0, 1).reshape(output.shape[1], -1).std(1)
                    spread.setdefault(name, []).append(
                        float(stds.max() / stds.min().clamp_min(1e-12))
                    )

            return record

        with torch.no_grad(), _forward_hooks(model, hook):
            for (x,) in context.input_batches():
                produced.clear()
                model(x)
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
            ranges = module.weight.detach().abs().reshape(module.weight.shape[0], -1).amax(1)
            ranges = ranges[ranges > 0]
            if len(ranges) < 2:
                continue
            ratio = float(ranges.max() / ranges.min())
            if ratio <= self.ratio_warning:
                continue
            evidence = {
                "weight_range_ratio": round(ratio, 2),
                "preactivation_std_ratio": round(max(spread[name]), 2),
            }
            if per_tensor:
                findings.append(
                    self.finding(
                        "warning",
                        f"per-channel weight ranges differ by {ratio:.0f}x, as after folding a "
                        f"batch norm; per-tensor weights lose {math.log2(ratio):.1f} bits on the "
                        "narrowest channels: quantize weights per channel (axis 0)",
                        layer=name,
                        evidence=evidence,
                        recommendation={"quantization": {"weight": {"axis": 0}}},
                    )
                )
            else:
                findings.append(
                    self.finding(
                        "info",
                        f"per-channel weight ranges differ by {ratio:.0f}x (a folded batch norm?); "
                        "per-channel weight quantization already covers it",
                        layer=name,
                        evidence=evidence,
                    )
                )
        if not findings:
            findings.append(self.finding("info", "no batch norm after a convolution"))
        return findings


class _Concatenations:
    """Hook object for HookRunner: the largest |value| of each input of every concatenation."""

    def __init__(self) -> None:
        self.ranges: dict[str, list[float]] = {}

    def ConcatenationPost(self, name: str, inputs: list[dict], output: dict) -> None:  # noqa: N802
        amax = [float(np.abs(t["data"]).max()) if t["data"].size else 0.0 for t in inputs]
        known = self.ranges.get(name)
        if known is not None:
            amax = [max(a, b) for a, b in zip(known, amax, strict=True)]
        self.ranges[name] = amax


@register_inspector
class ConcatenatedOutputs(BaseInspector):
    """Concatenations (torch.cat anywhere in the forward pass, found at the operator level)
    whose inputs' ranges differ by more than 8x: the tensor they form is quantized with one
    scale, so the narrowest branch loses log2(ratio) bits; warning, suggesting to rescale the
    branches (e.g. a normalization per branch) or raise the consuming layer's input bits."""

    name = "ConcatenatedOutputs"
    ratio_warning = 8.0

    def run(self, context: DiagnosisContext) -> list[Finding]:
        from model_explorer.analysis.hooks import HookRunner

        watcher = _Concatenations()
        HookRunner(context.float_model, watcher).run(context.input_batches())
        findings = []
        for name, ranges in watcher.ranges.items():
            positive = [r for r in ranges if r > 0]
            if len(positive) < 2:
                continue
            ratio = max(positive) / min(positive)
            if ratio > self.ratio_warning:
                findings.append(
                    self.finding(
                        "warning",
                        f"concatenates branches with ranges {_round(ranges, 3)} ({ratio:.0f}x "
                        f"apart): one scale for all costs the narrowest {math.log2(ratio):.1f} "
                        "bits; rescale the branches or give the consumer more input bits",
                        layer=name,
                        evidence={"ranges": _round(ranges), "ratio": round(ratio, 2)},
                    )
                )
        return findings


@register_inspector
class HighPrecision(BaseInspector):
    """Per layer, the quantization error at the workload's configured bit widths
    (`quantization.input/weight.num_bits`) with every other layer in float: the SQNR
    20 log10(|y| / |y - y_q|) of the layer's output, computed per output channel and averaged
    in dB (so channels drowned by a few wide ones count). A layer more than 10 dB below the
    median of all layers is a warning, more than 20 dB an error; the recommendation raises its
    lower explored bit bound by the missing dB / 6.02 bits (one bit is worth 6.02 dB)."""

    name = "HighPrecision"
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
                            "exploration": {
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


class _Stop(Exception):
    pass


def channel_sqnr(reference: Tensor, quantized: Tensor, cap_db: float = 100.0) -> float:
    """Mean over output channels (dim 1) of 10 log10(signal power / noise power), in dB;
    channels without signal are skipped, a noiseless channel counts as `cap_db`."""
    y = reference.double().transpose(0, 1).reshape(reference.shape[1], -1)
    noise = (quantized.double().transpose(0, 1).reshape(reference.shape[1], -1) - y).pow(2).sum(1)
    signal = y.pow(2).sum(1)
    keep = signal > 0
    if not keep.any():
        return cap_db
    ratio = signal[keep] / noise[keep].clamp_min(signal[keep] * 10 ** (-cap_db / 10))
    return float((10 * torch.log10(ratio)).mean())


def _bits_label(bits: list[int]) -> str:
    return str(bits[0]) if len(set(bits)) == 1 else f"{min(bits)}-{max(bits)}"


def layer_sqnr(context: DiagnosisContext) -> dict[str, float]:
    """SQNR (dB) of each quantized layer's output with only that layer quantized (at the
    model's current bit widths)."""
    model = context.quantized_model
    batches = [x for (x,) in context.input_batches()]
    with model.preserved_settings(), torch.no_grad():
        model.set_enabled(False)
        reference: dict[str, list[Tensor]] = {name: [] for name in model.layers}
        handles = [
            layer.register_forward_hook(
                lambda m, a, out, name=name: reference[name].append(out.detach().clone())
            )
            for name, layer in model.layers.items()
        ]
        try:
            for x in batches:
                model(x)
        finally:
            for handle in handles:
                handle.remove()
        table = {}
        for name, layer in model.layers.items():
            outputs: list[Tensor] = []

            def stop(module: nn.Module, args: Any, out: Tensor, outputs: list = outputs) -> None:
                outputs.append(out.detach().clone())
                raise _Stop  # nothing after this layer is needed

            handle = layer.register_forward_hook(stop)
            model.set_enabled(True, [f"{name}.input_quantizer", f"{name}.weight_quantizer"])
            try:
                for x in batches:
                    try:
                        model(x)
                    except _Stop:
                        pass
            finally:
                handle.remove()
            model.set_enabled(False)
            table[name] = channel_sqnr(torch.cat(reference[name]), torch.cat(outputs))
        return table


@register_inspector
class Compression(BaseInspector):
    """Info: the weights' size at the workload's configured bit widths against float32 (layers
    left in float and other parameters counted at 32 bits), the compression ratio, the average
    weight bits, and the BOPs against 32 x 32-bit MACs."""

    name = "Compression"

    def run(self, context: DiagnosisContext) -> list[Finding]:
        from model_explorer.cost import measure_layers

        model = context.quantized_model
        example = context.inputs[0][:1].to(context.device)
        costs = measure_layers(model, example, model.layers)
        bits = dict(zip(model.explorable_modules, model.bit_widths, strict=True))
        total = sum(p.numel() for p in model.model.parameters())
        quantized_elements = sum(costs[name].weight_elements for name in costs)
        weight_bits = sum(
            costs[name].weight_elements * bits[f"{name}.weight_quantizer"] for name in costs
        )
        size = weight_bits + 32 * (total - quantized_elements)
        bops = sum(
            costs[name].macs * bits[f"{name}.input_quantizer"] * bits[f"{name}.weight_quantizer"]
            for name in costs
        )
        float_bops = 32 * 32 * sum(costs[name].macs for name in costs)
        evidence = {
            "float_bytes": 4 * total,
            "quantized_bytes": size / 8,
            "ratio": round(32 * total / size, 3),
            "average_weight_bits": round(weight_bits / max(quantized_elements, 1), 3),
            "bops": bops,
            "float_bops": float_bops,
        }
        return [
            self.finding(
                "info",
                f"{evidence['quantized_bytes'] / 1024:.1f} KiB of parameters against "
                f"{evidence['float_bytes'] / 1024:.1f} KiB in float ({evidence['ratio']:.2f}x "
                f"smaller, {evidence['average_weight_bits']:.2f} bits per quantized weight); "
                f"BOPs {bops / float_bops:.1%} of float",
                evidence=evidence,
            )
        ]


@register_inspector
class Image(BaseInspector):
    """For image inputs (N, 3, H, W): writes up to eight calibration samples as RGB
    (standard.png) and with the channels reversed (inverse.png), each channel stretched to its
    range over the samples, so that a BGR/RGB mix-up shows. Interactively it asks which looks
    natural and reports an error when it is inverse.png; otherwise info."""

    name = "Image"
    samples = 8

    def run(self, context: DiagnosisContext) -> list[Finding]:
        x = context.inputs[0]
        if x.dim() != 4 or x.shape[1] != 3:
            shape = tuple(x.shape[1:])
            return [
                self.finding(
                    "info", f"inputs of shape {shape} are not 3-channel images: nothing to check"
                )
            ]
        images = _displayable(x[: self.samples])
        paths = {}
        for name, data in (("standard", images), ("inverse", images[..., ::-1])):
            paths[name] = context.out_dir / f"{name}.png"
            _save_grid(data, paths[name])
        evidence = {name: str(path) for name, path in paths.items()}
        if context.interactive:
            answer = context.ask(
                f"Which looks natural: {paths['standard']} (s) or {paths['inverse']} (i)? [s/i] "
            )
            if answer.strip().lower().startswith("i"):
                return [
                    self.finding(
                        "error",
                        "the images look natural only with their channels reversed: the inputs "
                        "are BGR where the model expects RGB (or the reverse); fix the dataset's "
                        "channel order",
                        evidence=evidence,
                    )
                ]
        return [
            self.finding(
                "info",
                f"wrote {paths['standard'].name} and {paths['inverse'].name} in "
                f"{context.out_dir}: if inverse.png shows the natural colours, the channels are "
                "swapped",
                evidence=evidence,
            )
        ]


def _displayable(x: Tensor) -> np.ndarray:
    """(N, 3, H, W) -> (N, H, W, 3) in [0, 1], each channel stretched over its range."""
    data = x.detach().double().cpu()
    low = data.amin(dim=(0, 2, 3), keepdim=True)
    high = data.amax(dim=(0, 2, 3), keepdim=True)
    data = (data - low) / (high - low).clamp_min(1e-12)
    return data.permute(0, 2, 3, 1).numpy()


def _save_grid(images: np.ndarray, path: Any) -> None:
    import matplotlib.pyplot as plt

    grid = np.concatenate(list(images), axis=1)  # side by side
    plt.imsave(path, np.ascontiguousarray(grid))


@register_inspector
class Sensitivity(BaseInspector):
    """One quantizer at a time at the lowest explored bit width, every other one in float:
    the accuracy drop on the exploration data (AIMET's per-layer analysis). Writes
    sensitivity.csv and sensitivity.png, ranked. A drop above 5 points is a warning, with the
    smallest bit width whose drop is at most 1 point (searched upwards) recommended as that
    quantizer's lower bound."""

    name = "Sensitivity"
    warning_drop, target_drop = 0.05, 0.01

    def run(self, context: DiagnosisContext) -> list[Finding]:
        if not context.has_exploration_data():
            return [
                self.finding(
                    "info", "no exploration data in the workload: sensitivity not measured"
                )
            ]
        low, high = context.bit_range
        table = layer_sensitivity(
            context.quantized_model,
            context.context.batches("exploration"),
            context.workload.metric,
            low,
        )
        context.cache["sensitivity"] = table
        table.to_csv(context.out_dir / "sensitivity.csv")
        plot_sensitivity(table, context.out_dir / "sensitivity.png")
        findings = []
        for rank, row in enumerate(table.ranked(), 1):
            if row.drop <= self.warning_drop:
                continue
            bits = table.bits_within(
                context.quantized_model,
                context.context.batches("exploration"),
                context.workload.metric,
                row.name,
                self.target_drop,
                (low + 1, high),
            )
            findings.append(
                self.finding(
                    "warning",
                    f"alone at {low} bits it costs {row.drop:.1%} accuracy "
                    f"(rank {rank} of {len(table.rows)}); {bits} bits keep the drop within "
                    f"{self.target_drop:.0%}",
                    layer=row.name,
                    evidence={"drop": round(row.drop, 4), "rank": rank, "bits": bits},
                    recommendation={"exploration": {"layer_bounds": {row.name: [bits, high]}}},
                )
            )
        top = table.ranked()[0]
        findings.append(
            self.finding(
                "info",
                f"float accuracy {table.baseline:.4f}; most sensitive at {low} bits: {top.name} "
                f"({top.drop:.1%}); table in sensitivity.csv, plot in sensitivity.png",
                evidence={"baseline": table.baseline, "drops": table.drops()},
            )
        )
        return findings


def plot_sensitivity(table: SensitivityTable, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table.ranked()
    figure, axes = plt.subplots(figsize=(max(6, 0.35 * len(rows) + 2), 4))
    axes.bar(range(len(rows)), [100 * row.drop for row in rows], color="tab:red")
    axes.set_xticks(range(len(rows)), [row.name for row in rows], rotation=75, fontsize=7)
    axes.set_ylabel("accuracy drop (points)")
    axes.set_title(f"one quantizer at {table.bits} bits, all others float")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
