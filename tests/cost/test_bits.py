"""The bit-cost model against hand computations on a two-layer network."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from model_explorer.cost.bits import BitCostModel, weighted_bits


def two_layers() -> nn.Module:
    # conv: 3 -> 4 channels, 3x3, on 6x6 (padding 1): 36 positions x 27 products each;
    # linear: 4*6*6 = 144 -> 5.
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(144, 5))


@pytest.fixture
def costs() -> BitCostModel:
    model = two_layers().eval()
    layers = {"0": model[0], "2": model[2]}
    return BitCostModel.measure(model, torch.zeros(2, 3, 6, 6), layers)


PLAN = {"0": {"input_bits": 8, "weight_bits": 4}, "2": {"input_bits": 6, "weight_bits": 3}}


def test_sizes_macs_and_bops_by_hand(costs: BitCostModel) -> None:
    conv_macs, linear_macs = 4 * 36 * 27, 5 * 144
    assert costs.macs == conv_macs + linear_macs
    assert costs.weight_elements == 4 * 27 + 5 * 144
    assert costs.model_size(PLAN) == 4 * (4 * 27) + 3 * (5 * 144)
    assert costs.bops(PLAN) == conv_macs * 8 * 4 + linear_macs * 6 * 3
    kept = {"0": 0.5}  # half of the convolution's input blocks are zero; all of the linear's kept
    assert costs.effective_bops(PLAN, kept) == conv_macs * 8 * 4 * 0.5 + linear_macs * 6 * 3


def test_weighted_bits_of_both_functions_by_hand() -> None:
    assert weighted_bits(PLAN, "bits_weighted_linear") == 8 + 4 + 6 + 3
    assert weighted_bits(PLAN, "bits_weighted_per_layer") == 5.0 * (8 + 6) + 0.5 * (4 + 3)
    with_threshold = {**PLAN, "0": {**PLAN["0"], "threshold": 0.3}}
    assert weighted_bits(with_threshold) == weighted_bits(PLAN)  # thresholds cost no bits
    with pytest.raises(ValueError, match="unknown bit weighting function"):
        weighted_bits(PLAN, "bits_squared")
