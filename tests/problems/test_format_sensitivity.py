"""The sensitivity start of a formats search: each quantizer's lower convex hull of (cost,
damage) and the path across quantizers, against hand computations; the table against the
model scored with one quantizer on; the seeds on the digits model against its constraint."""

from __future__ import annotations

import pytest
import torch

from model_explorer.metrics.functions import score
from model_explorer.problems.options import QuantizationOptions
from model_explorer.problems.quantization import LayerwiseQuantizationProblem
from model_explorer.quantization.format_sensitivity import FormatTable, format_path, hull
from tests_support import calibrated_digits

CHOICES = ["int8", "fp8_e4m3", "mxfp4", "nvfp4", "int4_g16"]


def test_the_hull_skips_dominated_and_above_hull_choices() -> None:
    # cost: 8 (least damage of the two), 8, 6, 4.25, 4
    costs, damages = [8.0, 8.0, 6.0, 4.25, 4.0], [0.01, 0.02, 0.05, 0.06, 0.3]
    start, moves = hull(costs, damages)
    assert start == 0
    # from (8, 0.01): to 6 costs 0.04 / 2 = 0.02 per unit, to 4.25 0.05 / 3.75 = 0.0133, to 4
    # 0.29 / 4: the hull goes to 4.25; from there to 4: 0.24 / 0.25
    assert [index for _, index in moves] == [3, 4]
    assert moves[0][0] == pytest.approx(0.05 / 3.75) and moves[1][0] == pytest.approx(0.96)


def test_the_path_takes_the_least_damage_per_cost_saved_across_quantizers() -> None:
    table = FormatTable(
        0.9,
        drops={
            "a": {"int8": 0.01, "int4": 0.05},  # 0.04 over 4 units: 0.01 per unit
            "b": {"int8": 0.0, "int6": 0.002, "int4": 0.2},  # 0.001, then 0.099 per unit
        },
    )
    bits = [[8.0, 4.0], [8.0, 6.0, 4.0]]
    start, path = format_path(table, ["a", "b"], bits, bits)
    assert start == [0, 0]
    assert path == [[0, 1], [1, 1], [1, 2]]


def test_an_unresolved_damage_is_not_free() -> None:
    """Two zero damages: the noise-model prior (half the resolution at the cheapest choice,
    a quarter of that per bit above) orders them, the wider step costing more."""
    table = FormatTable(0.9, drops={"a": {"int8": 0.0, "int6": 0.0}, "b": {"int8": 0.1}})
    start, path = format_path(table, ["a", "b"], [[8.0, 6.0], [8.0]], [[8.0, 6.0], [8.0]])
    slope_free = (0.05 - 0.05 / 16) / 2  # half of 0.1 at 6 bits; at 8 bits 16 times less
    assert start == [0, 0] and path == [[1, 0]]
    assert hull([8.0, 6.0], [0.05 / 16, 0.05])[1][0][0] == pytest.approx(slope_free)


@pytest.fixture(scope="module")
def digits(trained_digits, tmp_path_factory):
    return calibrated_digits(trained_digits, tmp_path_factory.mktemp("cal"))


def test_the_digits_formats_start(digits) -> None:
    context, model = digits
    options = QuantizationOptions(choices=CHOICES)
    batches = context.batches("exploration")
    built = LayerwiseQuantizationProblem(model, batches, options=options, minimum_accuracy=0.9)
    kept = []
    spent = built.seed_from_sensitivity(4, keep=lambda record: kept.append(dict(record)))
    table = FormatTable.from_plain(kept[-1]["formats"])
    # one forward per quantizer and format, and the float one, before the bisection's
    assert spent >= (1 + 10 * len(CHOICES)) * batches.num_samples
    assert len(kept) == 10 + 1  # the table kept after each quantizer, then the seeds
    # a damage is the score with that quantizer alone on in that format
    name, spelling = "3.weight_quantizer", "mxfp4"
    with torch.no_grad(), model.preserved_settings():
        model.set_enabled(False)
        model.quantizers[name].format = spelling
        model.quantizers[name].enabled = True
        alone = sum(score(model, batches, "top1").accuracies)
    assert table.drops[name][spelling] == pytest.approx(table.baseline - alone)
    assert 1 <= len(built.seeds) <= 4
    cheapest = built.evaluate(built.seeds[-1])[1]
    assert built.feasible(cheapest.values)  # the bisection's last accepted point
    widths = [built.cost_values(built.plan(built.decode(s)))["weighted_bits"] for s in built.seeds]
    assert widths == sorted(widths, reverse=True)  # spread from the dearest down
