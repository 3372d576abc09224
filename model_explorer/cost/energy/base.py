"""Per-layer DRAM accesses and energy of convolution and linear layers, from interchangeable
backends with one interface (the original tool read them from Timeloop runs).

Every backend is registered in ENERGY_BACKENDS (spec.py, with the workload's section and each
shipped backend's options, none of it importing torch) and is called as
`backend(model, example, options, layers)`. It returns one `LayerEnergy` per layer with DRAM
word accesses for weights (w), inputs (i) and outputs (o), split into reads, updates (writes of
results) and fills (writes of data arriving from outside), the energy of each data type in pJ
and the word width they assume. The CSV written by `energy_analysis` has the original tool's
columns plus the layer name. The workload's `energy_evaluation` names the backend (`backend`)
and holds its options beside the keys every backend shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from torch import nn

from model_explorer.cost.layers import WEIGHT_LAYERS

CSV_COLUMNS = [
    "layer_idx",
    "layer_type",
    "w_reads",
    "w_updates",
    "w_fills",
    "i_reads",
    "i_updates",
    "i_fills",
    "o_reads",
    "o_updates",
    "o_fills",
    "w_energy",
    "i_energy",
    "o_energy",
    "total_dram_energy",
    "bitwidth",
    "layer_name",
]

LAYER_TYPES = WEIGHT_LAYERS


@dataclass
class LayerEnergy:
    layer_idx: int
    layer_type: str
    w_reads: float
    w_updates: float
    w_fills: float
    i_reads: float
    i_updates: float
    i_fills: float
    o_reads: float
    o_updates: float
    o_fills: float
    w_energy: float  # pJ
    i_energy: float
    o_energy: float
    total_dram_energy: float
    bitwidth: int
    layer_name: str

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


def energy_layers(model: nn.Module, include: Sequence[str] | None = None) -> dict[str, nn.Module]:
    """The convolution and linear layers of `model` (module order), optionally only those named."""
    found = {}
    for name, module in model.named_modules():
        float_type = getattr(module, "float_type", type(module))
        if issubclass(float_type, LAYER_TYPES) and name and (include is None or name in include):
            found[name] = module
    return found


def layer_energy(
    index: int, name: str, module: nn.Module, counts: dict[str, float], pj: float, bits: int
) -> LayerEnergy:
    energy = {
        kind: (counts[f"{kind}_reads"] + counts[f"{kind}_updates"] + counts[f"{kind}_fills"]) * pj
        for kind in ("w", "i", "o")
    }
    layer_type = getattr(module, "float_type", type(module)).__name__
    return LayerEnergy(
        layer_idx=index,
        layer_type=layer_type,
        **counts,
        w_energy=energy["w"],
        i_energy=energy["i"],
        o_energy=energy["o"],
        total_dram_energy=sum(energy.values()),
        bitwidth=bits,
        layer_name=name,
    )


def rows_from_records(records: list[dict[str, Any]]) -> list[LayerEnergy]:
    """LayerEnergy rows from CSV records (strings or numbers); a missing layer name stays empty."""
    names = {f.name: f.type for f in fields(LayerEnergy)}
    rows = []
    for record in records:
        values = {}
        for key in names:
            value = record.get(key, "")
            if key in ("layer_idx", "bitwidth"):
                values[key] = int(float(value))
            elif key in ("layer_type", "layer_name"):
                values[key] = "" if value is None or value != value else str(value)
            else:
                values[key] = float(value)
        rows.append(LayerEnergy(**values))
    return rows
