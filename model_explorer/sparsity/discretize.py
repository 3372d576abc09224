"""Discrete threshold steps of the sparsity search (the original tool's two methods).

- linear: the edges of `linspace(0, limit, steps + 1)`;
- log: `(logspace(0, 1, steps) - 1) / 9 * limit`, from 0 to the limit, denser near 0;
- none: thresholds stay continuous.

A threshold is rounded up to the next edge; anything at or above the limit maps onto the last
edge (the original log method indexed past the end there).
"""

from __future__ import annotations

import numpy as np


def threshold_steps(limit: float, steps: int, method: str) -> np.ndarray:
    """The edges, rounded to 12 digits so that recorded thresholds read as 0.3 (not
    0.30000000000000004)."""
    if method == "linear":
        edges = np.linspace(0.0, limit, steps + 1)
    elif method == "log":
        edges = (np.logspace(0.0, 1.0, steps) - 1.0) / 9.0 * limit
    else:
        raise ValueError(f"unknown discretization method {method!r}")
    edges = np.round(edges, 12)
    edges[-1] = limit
    return edges


def discretize_threshold(value: float, limit: float, steps: int, method: str) -> float:
    """The threshold that actually runs for a genome value in [0, limit]."""
    value = min(max(float(value), 0.0), limit)
    if method == "none":
        return value
    edges = threshold_steps(limit, steps, method)
    index = int(np.searchsorted(edges, value, side="left"))
    return float(edges[min(index, len(edges) - 1)])
