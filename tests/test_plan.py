"""The per-layer plan: decoded from a configuration by variable names, applied to and read back
from QuantizedModel / SparseModel, and refused for layers the model does not have."""

from __future__ import annotations

import json

import pytest
import torch

from model_explorer.models import create_model
from model_explorer.plan import PlanLayout, apply_plan, current_plan, plan_of, variable_setting
from model_explorer.quantization import QuantizedModel
from model_explorer.sparsity import SparseModel


def test_variables_decode_by_their_names() -> None:
    names = ["conv.input_quantizer", "conv.weight_quantizer", "fc.input_quantizer", "conv", "fc"]
    plan = plan_of(names, [8, 4, 6, 0.25, 0.5])
    assert plan == {
        "conv": {"input_bits": 8, "weight_bits": 4, "threshold": 0.25},
        "fc": {"input_bits": 6, "threshold": 0.5},
    }
    assert json.loads(json.dumps(plan)) == plan  # plain data
    assert variable_setting("layer1.0.conv1.weight_quantizer") == ("layer1.0.conv1", "weight_bits")
    with pytest.raises(ValueError, match="3 values for 5 variables"):
        plan_of(names, [8, 4, 6])


def test_plans_of_one_layout_share_their_layer_names() -> None:
    layout = PlanLayout(["block.conv.input_quantizer", "block.conv.weight_quantizer"])
    first, second = layout.plan([8, 8]), layout.plan([2, 3])
    # One string object per layer: a result file of many plans stores each name once.
    assert next(iter(first)) is next(iter(second))


def _quantized_and_sparse() -> tuple[QuantizedModel, SparseModel]:
    torch.manual_seed(0)
    quantized = QuantizedModel(create_model("digits_cnn").eval())
    quantized.calibrate([torch.randn(16, 1, 8, 8)], method="max")
    return quantized, SparseModel(quantized.model, block_size=(4, 4))


def test_apply_then_read_back_the_same_plan() -> None:
    quantized, sparse = _quantized_and_sparse()
    names = quantized.explorable_modules + sparse.explorable_modules
    configuration = [2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 0.0, 0.05, 0.1, 0.15, 0.2]
    plan = plan_of(names, configuration)
    apply_plan(plan, quantized=quantized, sparse=sparse)
    assert quantized.bit_widths == configuration[:10]
    assert sparse.thresholds == configuration[10:]
    assert current_plan(quantized, sparse) == plan


def test_a_plan_sets_what_the_flat_bit_widths_set() -> None:
    """Applying a plan and setting `bit_widths` in explorable order give the same outputs."""
    quantized, _ = _quantized_and_sparse()
    x = torch.randn(8, 1, 8, 8)
    bits = [3, 5, 4, 2, 6, 8, 2, 7, 5, 3]
    quantized.bit_widths = bits
    expected = quantized(x)
    quantized.bit_widths = [8] * 10
    apply_plan(plan_of(quantized.explorable_modules, bits), quantized=quantized)
    assert torch.equal(quantized(x), expected)


def test_a_plan_for_another_model_is_refused() -> None:
    quantized, sparse = _quantized_and_sparse()
    with pytest.raises(ValueError, match="sets input_bits of layer 'conv9'"):
        apply_plan({"conv9": {"input_bits": 4}}, quantized=quantized)
    with pytest.raises(ValueError, match="sets threshold of layer '0'"):
        apply_plan({"0": {"threshold": 0.1}}, quantized=quantized)  # no SparseModel given
    with pytest.raises(ValueError, match="must not be negative"):
        apply_plan({"0": {"threshold": -0.1}}, sparse=sparse)
