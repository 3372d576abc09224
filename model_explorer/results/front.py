"""Pareto fronts over objective matrices."""

from __future__ import annotations

import numpy as np


def non_dominated(matrix: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows no other row dominates (all objectives minimised). Duplicate
    rows do not dominate each other, so both stay."""
    rows = len(matrix)
    keep = np.ones(rows, dtype=bool)
    for i in range(rows):
        no_worse = np.all(matrix <= matrix[i], axis=1)
        better = np.any(matrix < matrix[i], axis=1)
        if np.any(no_worse & better):
            keep[i] = False
    return keep
