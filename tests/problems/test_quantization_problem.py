"""LayerwiseQuantizationProblem on the trained digits model: costs, bounds, early rejection."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from model_explorer.cost.bits import weighted_bits
from model_explorer.errors import UserError
from model_explorer.problems.options import QuantizationOptions
from model_explorer.problems.quantization import LayerwiseQuantizationProblem
from tests_support import calibrated_digits


@pytest.fixture(scope="module")
def digits(trained_digits, tmp_path_factory):
    return calibrated_digits(trained_digits, tmp_path_factory.mktemp("cal"))


def problem(digits, minimum_accuracy=None, **settings) -> LayerwiseQuantizationProblem:
    """The problem with `settings` as its options (QuantizationOptions' keys)."""
    context, model = digits
    options = QuantizationOptions(**settings)
    return LayerwiseQuantizationProblem(
        model, context.batches("exploration"), options=options, minimum_accuracy=minimum_accuracy
    )


def test_variables_follow_the_limits_and_layer_bounds(digits) -> None:
    built = problem(
        digits,
        num_bits_lower_limit=2,
        num_bits_upper_limit=12,
        layer_bounds={"0.*": (8, 8), "*.weight_quantizer": (2, 6), "14.*": (4, 12)},
    )
    bounds = {v.name: (v.lower, v.upper) for v in built.variables}
    assert len(bounds) == 10
    assert bounds["0.input_quantizer"] == (8, 8)
    assert bounds["0.weight_quantizer"] == (2, 6)  # the later pattern wins
    assert bounds["3.input_quantizer"] == (2, 12)
    assert bounds["14.weight_quantizer"] == (4, 12)


def test_cost_values_by_hand(digits) -> None:
    built = problem(digits)
    bits = [8, 4, 6, 5, 7, 3, 2, 8, 5, 5]
    # digits_cnn on 8x8 inputs: MACs per sample of its five layers.
    macs = [8 * 8 * 16 * 9, 8 * 8 * 32 * 16 * 9, 4 * 4 * 32 * 32 * 9, 64 * 512, 10 * 64]
    weights = [16 * 9, 32 * 16 * 9, 32 * 32 * 9, 64 * 512, 10 * 64]
    costs = built.cost_values(built.plan(bits))
    assert costs["bops"] == sum(m * bits[2 * i] * bits[2 * i + 1] for i, m in enumerate(macs))
    assert costs["model_size"] == sum(w * bits[2 * i + 1] for i, w in enumerate(weights))
    assert costs["weighted_bits"] == sum(bits)
    per_layer = weighted_bits(built.plan(bits), "bits_weighted_per_layer")
    assert per_layer == 5.0 * sum(bits[0::2]) + 0.5 * sum(bits[1::2])


def test_early_rejection_never_rejects_a_feasible_candidate(digits) -> None:
    float_accuracy = digits[0].evaluate(digits[0].build_model(), "exploration")
    minimum = [0.97 * float_accuracy]
    early = problem(digits, minimum_accuracy=minimum, early_reject=True)
    full = problem(digits, minimum_accuracy=minimum, early_reject=False)
    rng = random.Random(0)
    rejected = 0
    for _ in range(60):
        genome = [rng.randint(2, 8) for _ in early.variables]
        _, quick = early.evaluate(genome)
        _, complete = full.evaluate(genome)
        assert complete.complete
        if quick.complete:
            assert quick.values == complete.values
        else:
            rejected += 1
            assert not full.feasible(complete.values)
            assert quick.values["accuracy"] >= complete.values["accuracy"]  # an upper bound
            assert quick.extra["samples"] < complete.extra["samples"]
        assert early.feasible(quick.values) == full.feasible(complete.values)
    assert rejected > 5  # the check above was exercised


def test_non_finite_model_is_infeasible(digits) -> None:
    context, _ = digits
    built = problem(digits, minimum_accuracy=[0.0])
    layer = built.model.layers["14"]
    original = layer.bias.detach().clone()
    with torch.no_grad():
        layer.bias[0] = float("nan")
    try:
        _, evaluation = built.evaluate([8] * 10)
    finally:
        with torch.no_grad():
            layer.bias.copy_(original)
    assert not evaluation.finite and not built.feasible(evaluation.values)


def test_objectives_are_checked(digits) -> None:
    with pytest.raises(
        ValidationError, match="\\['throughput'\\] cannot be used with this problem"
    ):
        problem(digits, objectives=["accuracy", "throughput"])
    with pytest.raises(ValidationError, match="\\['created_blocks'\\] cannot be used"):
        problem(digits, objectives=["accuracy", "created_blocks"])  # no thresholds here
    with pytest.raises(UserError, match="'energy' needs per-layer DRAM energies"):
        problem(digits, objectives=["accuracy", "energy"])
    with pytest.raises(UserError, match="2 values for a model with 1 outputs"):
        problem(digits, minimum_accuracy=[0.9, 0.8])


def test_result_size_does_not_grow_with_the_model(digits, tmp_path: Path) -> None:
    from model_explorer.exploration import Explorer
    from model_explorer.exploration.spec import NSGASpec
    from model_explorer.models import create_model
    from model_explorer.quantization import QuantizedModel

    context, _ = digits
    batches = context.batches("exploration")
    sizes, parameters = [], []
    for width in (8, 128):
        torch.manual_seed(0)
        model = create_model("digits_cnn", width=width).eval()
        parameters.append(sum(p.numel() for p in model.parameters()))
        quantized = QuantizedModel(model)
        quantized.calibrate(batches, method="max")
        built = LayerwiseQuantizationProblem(quantized, batches, minimum_accuracy=[0.5])
        path = tmp_path / f"width{width}.pkl"
        Explorer(built, NSGASpec(pop_size=8, offsprings=8, generations=3), result_path=path).run()
        sizes.append(path.stat().st_size)
    assert parameters[1] > 50 * parameters[0]
    assert abs(sizes[1] - sizes[0]) < 0.05 * sizes[0]


@pytest.mark.parametrize(
    ("maximize", "bound", "front", "expected"),
    [
        # accuracy, maximised: the candidate must beat the best member at most as costly
        (True, 0.96, [(0.97, 30), (0.98, 40), (0.99, 50)], 0.98),
        # a divergence, minimised: it must come below the lowest one at most as costly
        (False, 0.05, [(0.03, 30), (0.02, 40), (0.01, 50)], 0.02),
        # no member at most as costly: the constraint's own bound
        (True, 0.96, [(0.99, 50)], 0.96),
        (False, 0.05, [(0.01, 50)], 0.05),
    ],
)
def test_stopping_at_the_front_follows_the_metrics_direction(
    maximize: bool, bound: float, front: list, expected: float
) -> None:
    """The accuracy a candidate of 45 weighted bits needs to join a front, by hand."""
    from model_explorer.problems.base import ModelProblem, Objective

    class Bare(ModelProblem):  # only what the rule reads: objectives and the front
        def measure(self, configuration):  # noqa: ANN001, ANN202
            raise AssertionError("not scored here")

    problem = object.__new__(Bare)
    problem.objectives = [Objective("accuracy", maximize), Objective("weighted_bits", False)]
    problem.front = [{"accuracy": a, "weighted_bits": c} for a, c in front]
    assert problem.entry_limits([bound], {"weighted_bits": 45}) == ([expected], None)
