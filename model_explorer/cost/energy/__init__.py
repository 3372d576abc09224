"""Per-layer DRAM energy: backends (analytic, zigzag) behind one registry, their CSV, and the
energy of a bit-width configuration."""

from __future__ import annotations

# Explicit imports register the shipped backends; ZigZag itself loads only when it runs.
from model_explorer.cost.energy import analytic as _analytic  # noqa: F401
from model_explorer.cost.energy import zigzag as _zigzag  # noqa: F401
from model_explorer.cost.energy.analytic import Accelerator, analytic_energy
from model_explorer.cost.energy.base import (
    CSV_COLUMNS,
    ENERGY_BACKENDS,
    EnergyEvaluationSpec,
    LayerEnergy,
    energy_layers,
    register_energy_backend,
    rows_from_records,
)
from model_explorer.cost.energy.model import EnergyModel

__all__ = [
    "CSV_COLUMNS",
    "ENERGY_BACKENDS",
    "Accelerator",
    "EnergyEvaluationSpec",
    "EnergyModel",
    "LayerEnergy",
    "analytic_energy",
    "energy_layers",
    "register_energy_backend",
    "rows_from_records",
]
