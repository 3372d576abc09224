"""The latency table's prediction, by hand: each layer's time under a plan, the features the
correction reads, the correction fitted to whole-graph timings made with known coefficients,
the prediction and its relative errors (no runtime: the numbers are the test's own)."""

from __future__ import annotations

import itertools

import pytest

from model_explorer.latency.table import LatencyTable, fit_correction, fit_errors


def hand_table() -> LatencyTable:
    """Three layers in a chain, each weight at 4 or 8 bits: a's and b's segments hold their
    successor's input quantizer (one choice), so a -> b and b -> c are passages; INT8 weights
    run on integer kernels, INT4 ones on float kernels with their weights dequantized. Times
    are exact in binary, each segment's less its call."""
    weights = {"4": "INT4", "8": "INT8"}
    genes = {f"{n}.weight_quantizer": weights for n in "abc"}
    genes |= {f"{n}.input_quantizer": {"8": "INT8"} for n in "bc"}
    site_genes = {f"{n}.w": f"{n}.weight_quantizer" for n in "abc"}
    site_genes |= {f"{n}.in": f"{n}.input_quantizer" for n in "bc"}

    def entry(sites, int4_ms, int8_ms, call_ms, count):  # noqa: ANN001, ANN202
        tail = "".join(" | INT8" for _ in sites[1:])
        return {
            "sites": sites,
            "times": {
                "INT4" + tail: {"median_ms": int4_ms, "integer": False},
                "INT8" + tail: {"median_ms": int8_ms, "integer": True},
            },
            "call_ms": call_ms,
            "weights": count,
        }

    layers = {
        "a": entry(["a.w", "b.in"], 3.0, 2.0, 0.5, 1_000_000),  # 2.5 and 1.5 ms
        "b": entry(["b.w", "c.in"], 4.0, 2.5, 0.0, 2_000_000),  # 4.0 and 2.5 ms
        "c": entry(["c.w"], 1.5, 1.25, 0.25, 500_000),  # 1.25 and 1.0 ms
    }
    return LatencyTable({}, {}, genes, {}, site_genes, layers)


def hand_plan(a: int, b: int, c: int) -> dict[str, dict[str, int]]:
    return {
        "a": {"weight_bits": a},
        "b": {"input_bits": 8, "weight_bits": b},
        "c": {"input_bits": 8, "weight_bits": c},
    }


def test_prediction_correction_and_errors_by_hand() -> None:
    """The correction is pinned by wholes made with known coefficients (whole = 2 + 1.5 x sum
    - 0.25 x integer layers + 0.5 x passages + 0.2 x million float weights): the fit gives them
    back, the prediction is that sum by hand, and the errors are relative errors by hand."""
    table = hand_table()
    time = {"a": {4: 2.5, 8: 1.5}, "b": {4: 4.0, 8: 2.5}, "c": {4: 1.25, 8: 1.0}}
    count = {"a": 1.0, "b": 2.0, "c": 0.5}  # millions of weights
    coefficients = {
        "intercept_ms": 2.0,
        "scale": 1.5,
        "per_integer_ms": -0.25,
        "per_transition_ms": 0.5,
        "per_float_million_weights_ms": 0.2,
    }
    wholes = []
    for bits in itertools.product((4, 8), repeat=3):
        chosen = dict(zip("abc", bits, strict=True))
        features = [
            sum(time[n][chosen[n]] for n in "abc"),
            sum(chosen[n] == 8 for n in "abc"),
            (chosen["a"] != chosen["b"]) + (chosen["b"] != chosen["c"]),
            sum(count[n] for n in "abc" if chosen[n] == 4),
        ]
        plan = hand_plan(*bits)
        assert table.features(plan) == features
        values = [1.0, *features]
        whole = sum(w * v for w, v in zip(coefficients.values(), values, strict=True))
        wholes.append({"plan": plan, "median_ms": whole, "features": features})
    assert table.features(hand_plan(4, 8, 4)) == [6.25, 1, 2, 1.5]
    # no correction yet: the prediction is the layer sum
    assert table.predict(hand_plan(4, 8, 4)) == 6.25
    fit = fit_correction(wholes)
    assert fit == pytest.approx(coefficients, abs=1e-6)
    table.fit, table.wholes = fit, wholes
    # 2 + 1.5 x 6.25 - 0.25 x 1 + 0.5 x 2 + 0.2 x 1.5
    assert table.predict(hand_plan(4, 8, 4)) == pytest.approx(12.425, abs=1e-6)
    # 2 + 1.5 x 5.0 - 0.25 x 3: all on integers, no passage, no float weights
    assert table.predict(hand_plan(8, 8, 8)) == pytest.approx(8.75, abs=1e-6)
    assert fit_errors(table) == pytest.approx([0.0] * 8, abs=1e-6)
    wholes[3]["median_ms"] *= 1.25  # measured 25% above the prediction: 0.25 / 1.25 of it
    errors = fit_errors(table)
    assert errors[3] == pytest.approx(0.2, abs=1e-6)
    assert errors[:3] + errors[4:] == pytest.approx([0.0] * 7, abs=1e-6)
    # Fewer than six wholes: the layer sum at scale 1, shifted by the median difference.
    few = [{"median_ms": s + d, "features": [s, 0, 0, 0.0]} for s, d in [(5, 1), (6, 3), (7, 2)]]
    assert fit_correction(few) == {
        "intercept_ms": 2.0,
        "scale": 1.0,
        "per_integer_ms": 0.0,
        "per_transition_ms": 0.0,
        "per_float_million_weights_ms": 0.0,
    }
