"""Inspectors of the model's input data: normalization (Norm) and channel order (Image)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.analysis.diagnose.base import (
    HIGH,
    LOW,
    BaseInspector,
    DiagnosisContext,
    Finding,
    register_inspector,
)
from model_explorer.analysis.diagnose.inspectors.common import (
    BATCH_NORMS,
    NORMALIZATIONS,
    forward_hooks,
    rounded,
)
from model_explorer.figures import pyplot


@register_inspector
class Norm(BaseInspector):
    """Is the model's input normalized? Measures each input channel's mean and standard
    deviation over the calibration data. Unless the model's first layer is a normalization, a
    channel with |mean| > 0.5 or a std outside [0.5, 2] is a warning (pixels scaled to [0, 1]
    land there, by their std of 0.2-0.4), |mean| > 3 or a std above 10 or below 0.05 an error
    (raw 0-255 pixels). The mean's bound is loose because a standardization measured on other
    data (ImageNet's means on a few photographs) leaves means of 0.3 at a std of 1.
    Data that fills [-1, 1] (every value inside it, each channel reaching past -0.5 and
    0.5: TensorFlow's and Inception's (p - 127.5) / 127.5 convention, EfficientNet-Lite's
    (p - 127) / 128) is normalized too, whatever its std over a set of photographs.
    A model that normalizes its input itself (a leading batch norm, or a subtraction and
    division by constants) is checked against what that normalization expects, as Hailo's
    tool checks the input of a normalization layer: data already normalized where the model
    expects raw values is an error (normalized twice); a spread 50x off (0-1 data for a
    model of 0-255 pixels, or the reverse) is an error telling the factor; data outside
    Hailo's bounds after the normalization (mean -2..5, std 0.1..5) a warning."""

    name = "Norm"
    priority = HIGH
    warn_mean, warn_std = 0.5, (0.5, 2.0)
    error_mean, error_std = 3.0, (0.05, 10.0)

    def run(self, context: DiagnosisContext) -> list[Finding]:
        x = torch.cat([x.detach().double().cpu() for x in context.inputs])
        channels = x.transpose(0, 1).reshape(x.shape[1], -1) if x.dim() > 1 else x[None]
        mean = channels.mean(1).tolist()
        std = channels.std(1).tolist()
        evidence = {"mean": rounded(mean), "std": rounded(std)}
        first = first_leaf(context.float_model, context.inputs[0].to(context.device))
        x = context.inputs[0].to(context.device)
        expected = in_model_normalization(context.float_model, first, x)
        if expected is not None:
            return [self._normalized_inside(np.array(mean), np.array(std), *expected)]
        if isinstance(first, NORMALIZATIONS):
            return [
                self.finding(
                    "info",
                    f"the model starts with {type(first).__name__}; input mean "
                    f"{evidence['mean']}, std {evidence['std']}",
                    evidence=evidence,
                )
            ]
        return [self._plain(channels, mean, std, evidence)]

    def _plain(self, channels: Tensor, mean: list, std: list, evidence: dict) -> Finding:
        """The data of a model that does not normalize its input itself, against the usual
        conventions: standardized, or filling [-1, 1]."""
        low, high = channels.amin(1), channels.amax(1)
        inside = bool((low >= -1.0 - 1e-6).all() and (high <= 1.0 + 1e-6).all())
        if inside and bool((low < -0.5).all() and (high > 0.5).all()):
            return self.finding(
                "info",
                f"input channel means {evidence['mean']}, stds {evidence['std']}, every value "
                "in [-1, 1]: scaled as (p - 127.5) / 127.5, the convention of TensorFlow's "
                "image networks",
                evidence=evidence,
            )
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
                "; the inputs are not normalized: for weights trained elsewhere (a published "
                "network), give the inputs the preprocessing they were trained with; for a "
                "model trained on this data, standardize them per channel (mean 0, std 1) in "
                "the dataset or put a normalization at the model's start, then retrain"
            )
        return self.finding(severity, message, evidence=evidence)

    def _normalized_inside(
        self, mean: np.ndarray, std: np.ndarray, expected: tuple, where: str
    ) -> Finding:
        """The data against the normalization the model applies itself (`where`), which
        expects per-channel `expected` = (mean, std): Hailo's checks of an input that feeds a
        normalization layer, with the scale told from the ratio of the stds."""
        want_mean, want_std = (np.broadcast_to(np.asarray(v, float), mean.shape) for v in expected)
        evidence = {
            "mean": rounded(mean),
            "std": rounded(std),
            "expected_mean": rounded(want_mean),
            "expected_std": rounded(want_std),
            "normalization": where,
        }
        ratio = float(np.median(std / want_std))
        evidence["std_ratio"] = round(ratio, 5)
        standardized = bool(np.all(np.abs(mean) <= 0.5) and np.all((std >= 0.5) & (std <= 2)))
        expects_standard = bool(
            np.all(np.abs(want_mean) <= 0.5) and np.all((want_std >= 0.5) & (want_std <= 2))
        )
        if standardized and not expects_standard:
            return self.finding(
                "error",
                f"the inputs are already normalized (mean {evidence['mean']}, std "
                f"{evidence['std']}) and {where} normalizes them again (mean "
                f"{evidence['expected_mean']}, std {evidence['expected_std']}): normalized "
                "twice; drop the dataset's normalization",
                evidence=evidence,
            )
        if ratio < 1 / 50 or ratio > 50:
            factor = "multiply them by 255" if ratio < 1 else "divide them by 255"
            scale = "[0, 1]" if ratio < 1 else "[0, 255]"
            return self.finding(
                "error",
                f"the inputs have {ratio:.4g}x the spread {where} expects: they look scaled "
                f"to {scale} where the model was trained on the other scale; {factor} in the "
                "dataset",
                evidence=evidence,
            )
        after_mean, after_std = (mean - want_mean) / want_std, std / want_std
        if np.all((after_mean > -2) & (after_mean < 5)) and np.all(
            (after_std > 0.1) & (after_std < 5)
        ):
            return self.finding("info", f"the inputs match what {where} expects", evidence=evidence)
        return self.finding(
            "warning",
            f"after {where} the inputs have mean {rounded(after_mean, 3)}, std "
            f"{rounded(after_std, 3)}, outside Hailo's bounds (mean -2..5, std 0.1..5): the "
            "data is not distributed as the model was trained on",
            evidence=evidence,
        )


def in_model_normalization(model: nn.Module, first: nn.Module | None, x: Tensor) -> Any:
    """((mean, std), where) of the normalization the model applies to its input itself, or
    None: a leading batch norm (its running statistics are the inputs it was trained on), or
    a subtraction and a division (or multiplication) of the input by constants at the start
    of its forward (e.g. torchvision's Normalize inside the model)."""
    if isinstance(first, BATCH_NORMS) and first.running_mean is not None:
        std = torch.sqrt(first.running_var + first.eps)
        return (first.running_mean.tolist(), std.tolist()), f"batch norm {type(first).__name__}"
    from model_explorer.analysis.hooks.recording import Recorder

    recording = Recorder(model).run((x[:1],), ["input"])
    calls = recording.calls[:2]
    if len(calls) < 2 or calls[0].packet.rstrip("_") != "sub":
        return None
    source, shift = calls[0].args[:2]
    scaling, (first_arg, factor) = calls[1], calls[1].args[:2]
    if source is not recording.inputs[0] or first_arg.base is not calls[0].outputs[0].base:
        return None
    constants = [_constant(shift), _constant(factor)]
    if None in constants or scaling.packet.rstrip("_") not in ("div", "mul"):
        return None
    mean, divisor = constants
    std = divisor if scaling.packet.rstrip("_") == "div" else 1 / divisor
    return (mean.tolist(), std.tolist()), "the model's own normalization (subtract, divide)"


def _constant(value: Any) -> np.ndarray | None:
    """A per-channel constant operand (a number, or a constant tensor broadcast along the
    channels) as a flat array, else None."""
    from model_explorer.analysis.hooks.recording import Value

    if isinstance(value, (int, float)):
        return np.array([float(value)])
    if isinstance(value, Value) and value.is_const:
        return np.asarray(value.data, float).reshape(-1)
    return None


def first_leaf(model: nn.Module, x: Tensor) -> nn.Module | None:
    order: list[nn.Module] = []

    def record(name: str, module: nn.Module, args: Any, output: Any) -> None:
        order.append(module)

    with torch.no_grad(), forward_hooks(model, record):
        model(x[:1])
    return order[0] if order else None


@register_inspector
class Image(BaseInspector):
    """For image inputs (N, 3, H, W): writes up to eight calibration samples as RGB
    (standard.png) and with the channels reversed (inverse.png), each channel stretched to its
    range over the samples, so that a BGR/RGB mix-up shows. Interactively it asks which looks
    natural and reports an error when it is inverse.png; otherwise info."""

    name = "Image"
    priority = LOW
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
    plt = pyplot()
    grid = np.concatenate(list(images), axis=1)  # side by side
    plt.imsave(path, np.ascontiguousarray(grid))
