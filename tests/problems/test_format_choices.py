"""A search over formats: each quantizer's gene chooses one of `choices` (narrowed per quantizer
by `layer_bounds`), the plan holds the chosen formats, and the objectives count bits per element.

Oracles: costs summed by hand from the digits model's layer sizes and each format's definition,
the quantizers' own state after a plan is applied, and outputs recomputed with the formats'
numerics on the float layers."""

from __future__ import annotations

import pytest
import torch

from model_explorer.formats import parse_format
from model_explorer.plan import current_plan, layer_formats
from model_explorer.problems.options import QuantizationOptions
from model_explorer.problems.quantization import LayerwiseQuantizationProblem
from tests_support import calibrated_digits

CHOICES = ["int8", "fp8_e4m3", "mxfp4", "nvfp4", "int4_g16"]
# Cheapest first: bits per element with the scales counted.
ORDER = ["mxfp4", "nvfp4", "int4_g16", "int8", "fp8_e4m3"]


@pytest.fixture(scope="module")
def digits(trained_digits, tmp_path_factory):
    return calibrated_digits(trained_digits, tmp_path_factory.mktemp("cal"))


def problem(digits, **settings) -> LayerwiseQuantizationProblem:
    context, model = digits
    options = QuantizationOptions(choices=CHOICES, **settings)
    return LayerwiseQuantizationProblem(model, context.batches("exploration"), options=options)


def test_genes_index_the_choices_cheapest_first(digits) -> None:
    built = problem(digits, layer_bounds={"*.input_quantizer": ["int8", "fp8_e4m3"]})
    bounds = {v.name: (v.lower, v.upper, v.integer) for v in built.variables}
    assert bounds["0.weight_quantizer"] == (0, 4, True)
    assert bounds["0.input_quantizer"] == (0, 1, True)
    genome = [1, 0, 0, 3, 1, 2, 0, 4, 1, 1]
    configuration = built.decode(genome)
    assert configuration[:4] == ["fp8_e4m3", "mxfp4", "int8", "int8"]
    assert configuration[5] == ORDER[2]


def test_costs_are_bits_per_element_by_hand(digits) -> None:
    built = problem(digits)
    configuration = built.decode([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
    bits = [parse_format(name).bits for name in configuration]
    assert bits == [4.25, 4.5, 5.0, 8.0, 8.0, 4.25, 4.5, 5.0, 8.0, 8.0]
    macs = [8 * 8 * 16 * 9, 8 * 8 * 32 * 16 * 9, 4 * 4 * 32 * 32 * 9, 64 * 512, 10 * 64]
    weights = [16 * 9, 32 * 16 * 9, 32 * 32 * 9, 64 * 512, 10 * 64]
    costs = built.cost_values(built.plan(configuration))
    assert costs["weighted_bits"] == pytest.approx(sum(bits), abs=1e-12)
    assert costs["model_size"] == pytest.approx(
        sum(w * bits[2 * i + 1] for i, w in enumerate(weights)), rel=1e-12
    )
    assert costs["bops"] == pytest.approx(
        sum(m * bits[2 * i] * bits[2 * i + 1] for i, m in enumerate(macs)), rel=1e-12
    )


def test_a_plan_of_formats_is_what_the_quantizers_hold(digits) -> None:
    built = problem(digits)
    context, model = digits
    configuration = built.decode([4, 0, 1, 2, 3, 0, 2, 1, 0, 4])
    with model.preserved_settings():
        evaluation = built.measure(configuration)
        plan = built.plan(configuration)
        # int8 chosen as a format is the integer quantizer at 8 bits.
        assert layer_formats(current_plan(model)) == layer_formats(plan)
        held = {name: q.format.spelling for name, q in model.quantizers.items()}
        assert list(held.values()) == configuration
        assert 0.0 <= evaluation.values["accuracy"] <= 1.0
    # Leaving the block gives every quantizer its integer bit width back.
    assert all(q.format.classic for q in model.quantizers.values())


def test_switching_to_a_format_and_back_is_bit_identical(digits) -> None:
    context, model = digits
    x = next(iter(context.batches("exploration")))[0][:16]
    with torch.no_grad(), model.preserved_settings():
        before = model(x)
        for quantizer in model.quantizers.values():
            quantizer.format = "mxfp6_e2m3"
        changed = model(x)
        for quantizer in model.quantizers.values():
            quantizer.format = "int8"
        after = model(x)
    assert torch.equal(before, after)
    assert not torch.equal(before, changed)
