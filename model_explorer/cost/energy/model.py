"""Energy of a bit-width configuration from per-layer DRAM energies (the original formula).

For quantized layers k with input bits b_in and weight bits b_w, and DRAM energies I, W, O of a
CSV row measured at `bitwidth` bits per word (16 in the original):

    energy = sum_k (I_k * b_in_k + W_k * b_w_k) / bitwidth + sum_p O_p * s_p

Each layer's output p is written once. The original scaled it by the next layer's input bits
(O_{k-1} * b_in_k / 16); in a network with branches and residual additions the layers reading
data derived from p may be several, so s_p is the widest input precision among them divided by
`bitwidth`, and an output no quantized layer reads (the network's result) counts in full
(s_p = 1). Rows are aligned to layers by name, never by position.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from model_explorer.cost.bits import element_bits
from model_explorer.cost.energy.base import LayerEnergy
from model_explorer.cost.graph import MODEL_INPUT
from model_explorer.plan import INPUT_BITS, WEIGHT_BITS

log = logging.getLogger(__name__)


class EnergyModel:
    def __init__(
        self,
        rows: Sequence[LayerEnergy],
        layers: Sequence[str],
        producers: Mapping[str, set[str]],
        source: str = "the energy analysis",
    ) -> None:
        by_name = {row.layer_name: row for row in rows}
        missing = [name for name in layers if name not in by_name]
        if missing:
            log.warning(
                "%s has no row for layers %s; their DRAM energy counts as 0. Rerun "
                "`model-explorer energy-analysis` for this model",
                source,
                ", ".join(missing),
            )
        self.layers = list(layers)
        self.rows = {name: by_name[name] for name in self.layers if name in by_name}
        self.consumers: dict[str, list[str]] = {name: [] for name in self.layers}
        for name in self.layers:
            for producer in producers.get(name, ()):
                if producer != MODEL_INPUT and producer in self.consumers:
                    self.consumers[producer].append(name)

    def energy_uj(self, plan: Mapping[str, Mapping[str, Any]]) -> float:
        """The DRAM energy in uJ of a plan's bit widths (every quantized layer's; bits per
        element, scales counted, for formats other than integers)."""
        input_bits = {name: element_bits(plan[name], INPUT_BITS) for name in self.layers}
        weight_bits = {name: element_bits(plan[name], WEIGHT_BITS) for name in self.layers}
        total = 0.0
        for name, row in self.rows.items():
            total += (
                row.i_energy * input_bits[name] + row.w_energy * weight_bits[name]
            ) / row.bitwidth
            readers = self.consumers[name]
            scale = max(input_bits[r] for r in readers) / row.bitwidth if readers else 1.0
            total += row.o_energy * scale
        return total / 1e6  # pJ -> uJ

    def full_precision_uj(self) -> float:
        """Every term at the rows' own word width: the model as the CSV measured it."""
        return sum(row.total_dram_energy for row in self.rows.values()) / 1e6
