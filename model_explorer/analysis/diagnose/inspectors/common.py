"""What the shipped inspectors share: layer kinds, rounding for evidence, forward hooks."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from model_explorer.modules import After, module_hooks

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


def rounded(values: Any, digits: int = 4) -> Any:
    if isinstance(values, (list, tuple, np.ndarray)):
        return [rounded(v, digits) for v in values]
    return round(float(values), digits)


def forward_hooks(model: nn.Module, after: After, leaves_only: bool = True) -> Any:
    """`after(name, module, args, output)` after every named (leaf) module's forward, for the
    duration of a `with` block (see modules.module_hooks)."""
    chosen = [
        (name, module)
        for name, module in model.named_modules()
        if name and (not leaves_only or not list(module.children()))
    ]
    return module_hooks(model, after=after, modules=chosen)
