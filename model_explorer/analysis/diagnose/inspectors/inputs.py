"""Inspectors of the model's input data: normalization (Norm) and channel order (Image)."""

from __future__ import annotations

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
from model_explorer.analysis.diagnose.inspectors.common import (
    NORMALIZATIONS,
    forward_hooks,
    rounded,
)
from model_explorer.figures import pyplot


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
        evidence = {"mean": rounded(mean), "std": rounded(std)}
        first = first_leaf(context.float_model, context.inputs[0].to(context.device))
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
