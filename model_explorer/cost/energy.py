"""Per-layer DRAM accesses and energy of convolution and linear layers, from interchangeable
backends with one interface (the original tool read them from Timeloop runs).

Every backend returns one `LayerEnergy` per layer with DRAM word accesses for weights (w),
inputs (i) and outputs (o), split into reads, updates (writes of results) and fills (writes of
data arriving from outside), the energy of each data type in pJ and the word width they assume.
The CSV written by `energy_analysis` has the original tool's columns plus the layer name.

`analytic` (default, no extra dependency) is a data-movement model of an accelerator with a
global buffer between DRAM and the processing elements:

- half of the buffer holds weights: a layer's weights are read from DRAM once, in
  `ceil(weight bytes / (buffer / 2))` tiles of output channels;
- the layer's input is streamed from DRAM once per weight tile;
- the output is written to DRAM once (updates);
- every access moves one word of `word_bits` and costs `dram_pj_per_word`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import nn

from model_explorer.cost.layers import WEIGHT_LAYERS, measure_layers
from model_explorer.registry import Registry

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


@dataclass(frozen=True)
class Accelerator:
    """The analytic backend's accelerator: global buffer, DRAM word, energy per DRAM access."""

    global_buffer_kib: float = 108.0  # Eyeriss' global buffer
    word_bits: int = 16
    dram_pj_per_word: float = 200.0  # about 200 times a 16-bit MAC (Eyeriss' energy ratios)


EnergyBackend = Callable[..., list[LayerEnergy]]
ENERGY_BACKENDS: Registry[EnergyBackend] = Registry("energy backend")


def energy_layers(model: nn.Module, include: Sequence[str] | None = None) -> dict[str, nn.Module]:
    """The convolution and linear layers of `model` (module order), optionally only those named."""
    found = {}
    for name, module in model.named_modules():
        float_type = getattr(module, "float_type", type(module))
        if issubclass(float_type, LAYER_TYPES) and name and (include is None or name in include):
            found[name] = module
    return found


def _entry(
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


@ENERGY_BACKENDS.register("analytic")
def analytic_energy(
    model: nn.Module,
    example: torch.Tensor,
    accelerator: Accelerator | None = None,
    layers: Sequence[str] | None = None,
) -> list[LayerEnergy]:
    """DRAM accesses of every convolution/linear layer for one forward pass of `example`."""
    accelerator = accelerator or Accelerator()
    chosen = energy_layers(model, layers)
    costs = measure_layers(model, example, chosen)
    batch = example.shape[0]
    word_bytes = accelerator.word_bits / 8
    half_buffer = accelerator.global_buffer_kib * 1024 / 2
    rows = []
    for index, (name, module) in enumerate(chosen.items()):
        cost = costs[name]
        weight_tiles = max(1, math.ceil(cost.weight_elements * word_bytes / half_buffer))
        counts = {
            "w_reads": float(cost.weight_elements),
            "w_updates": 0.0,
            "w_fills": 0.0,
            "i_reads": float(cost.input_elements * batch * weight_tiles),
            "i_updates": 0.0,
            "i_fills": 0.0,
            "o_reads": 0.0,
            "o_updates": float(cost.output_elements * batch),
            "o_fills": 0.0,
        }
        rows.append(
            _entry(index, name, module, counts, accelerator.dram_pj_per_word, accelerator.word_bits)
        )
    return rows


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
