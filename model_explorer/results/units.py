"""The unit each objective's value is in, for axes and tables (problems/objectives.py says what
each measures); results are read without torch, so the units live here."""

from __future__ import annotations

UNITS = {
    "weighted_bits": "bits, weighted",
    "model_size": "bits",
    "bops": "bit operations per sample",
    "energy": "uJ per sample",
    "latency": "ms per batch, predicted",
    "created_blocks": "zero blocks per sample",
    "block_sparsity": "share of blocks",
    "effective_bops": "bit operations per sample",
}


def with_unit(name: str) -> str:
    """`name (unit)` for an objective with a unit, the name itself otherwise."""
    unit = UNITS.get(name)
    return name if unit is None else f"{name} ({unit})"
