"""The `analytic` energy backend (default, no extra dependency): a data-movement model of an
accelerator with a global buffer between DRAM and the processing elements.

- half of the buffer holds weights: a layer's weights are read from DRAM once, in
  `ceil(weight bytes / (buffer / 2))` tiles of output channels;
- the layer's input is streamed from DRAM once per weight tile;
- the output is written to DRAM once (updates);
- every access moves one word of `word_bits` and costs `dram_pj_per_word`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from model_explorer.cost.energy.base import LayerEnergy, energy_layers, layer_energy
from model_explorer.cost.energy.spec import Accelerator
from model_explorer.cost.layers import measure_layers


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
            layer_energy(
                index, name, module, counts, accelerator.dram_pj_per_word, accelerator.word_bits
            )
        )
    return rows
