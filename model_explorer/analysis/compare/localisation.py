"""Where two environments' outputs differ: the relative error of two arrays, the first operator
whose intermediates differ above a tolerance, and the samples worth localising on."""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import Tensor


def relative_error(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(max |a - b|, that divided by max(max |a|, max |b|)); 0 relative error for two zeros."""
    if a.size == 0:
        return 0.0, 0.0
    largest = float(np.abs(a - b).max())
    scale = max(float(np.abs(a).max()), float(np.abs(b).max()))
    if scale == 0.0:
        return largest, 0.0 if largest == 0.0 else float("inf")
    return largest, largest / scale


def _layer(name: str) -> str:
    return name.partition("/")[0] if "/" in name else ""


def localise(a: dict[str, Tensor], b: dict[str, Tensor], tolerance: float) -> dict[str, Any]:
    """Per-operator errors of two environments' intermediates, compared by operator name in
    A's execution order, and the first operator whose relative error exceeds `tolerance`."""
    layers = []
    first = None
    missing = 0
    for name, value in a.items():
        other = b.get(name)
        if other is None or other.shape != value.shape:
            missing += 1
            continue
        absolute, relative = relative_error(value.numpy(), other.numpy())
        row = {
            "name": name,
            "layer": _layer(name),
            "opcode": name.rpartition("/")[2].partition("#")[0],
            "shape": list(value.shape),
            "max_abs_error": absolute,
            "relative_error": relative,
        }
        layers.append(row)
        if first is None and not relative <= tolerance:  # NaN counts as above
            first = row
    return {"first": first, "operators": layers, "unmatched": missing, "tolerance": tolerance}


def localisation_samples(a: np.ndarray, b: np.ndarray, count: int) -> list[int]:
    """Samples whose top-1 differs first (in order), then those with the largest error."""
    differ = np.flatnonzero(a.argmax(axis=1) != b.argmax(axis=1)).tolist()
    error = np.abs(a - b).max(axis=1)
    rest = [int(i) for i in np.argsort(-error, kind="stable") if int(i) not in set(differ)]
    return sorted((differ + rest)[:count])
