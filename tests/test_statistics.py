"""Intervals and paired tests from per-sample outcomes, against hand computations and scipy's
own implementations of the same statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from model_explorer.results.statistics import (
    mcnemar,
    mean_interval,
    pack_hits,
    pack_values,
    paired_means,
    unpack_hits,
    unpack_values,
    wilson,
)


def test_outcomes_travel_as_plain_strings() -> None:
    rng = np.random.default_rng(0)
    hits = rng.random(361) < 0.9  # not a multiple of 8
    values = rng.exponential(0.01, 97)
    assert isinstance(pack_hits(hits), str) and isinstance(pack_values(values), str)
    assert np.array_equal(unpack_hits(pack_hits(hits)), hits)
    assert np.allclose(unpack_values(pack_values(values)), values.astype(np.float32))


@pytest.mark.parametrize(("right", "samples"), [(354, 360), (360, 360), (0, 12), (91, 96)])
def test_wilson_interval_matches_scipy(right: int, samples: int) -> None:
    hits = np.zeros(samples, dtype=bool)
    hits[:right] = True
    found = wilson(hits)
    expected = stats.binomtest(right, samples).proportion_ci(0.95, method="wilson")
    assert found.value == pytest.approx(right / samples)
    assert found.low == pytest.approx(expected.low, abs=1e-9)
    assert found.high == pytest.approx(expected.high, abs=1e-9)


def test_wilson_by_hand() -> None:
    # 354 of 360: p = 0.98333, z = 1.959964; centre (p + z^2/2n) / (1 + z^2/n)
    z, n, p = 1.959964, 360, 354 / 360
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    found = wilson([True] * 354 + [False] * 6)
    assert (found.low, found.high) == pytest.approx((centre - half, centre + half), abs=1e-6)
    assert found.low == pytest.approx(0.9641, abs=1e-4)


def test_mcnemar_three_discordant_pairs_one_way_is_not_significant() -> None:
    # 96 samples; the second candidate gets 3 right that the first gets wrong, nothing else
    # differs: exact two-sided p = 2 * 0.5**3 = 0.25
    first = np.ones(96, dtype=bool)
    first[:3] = False
    second = np.ones(96, dtype=bool)
    found = mcnemar(first, second)
    assert (found.only_first, found.only_second) == (0, 3)
    assert found.p_value == pytest.approx(0.25)
    assert found.difference == pytest.approx(-3 / 96)
    assert not found.distinct


def test_mcnemar_sees_a_real_difference() -> None:
    # 20 samples only the first gets right, 2 only the second: p = 2 * P(X <= 2 | 22, 1/2)
    first = np.array([True] * 20 + [False] * 2 + [True] * 300)
    second = np.array([False] * 20 + [True] * 2 + [True] * 300)
    found = mcnemar(first, second)
    expected = 2 * sum(math.comb(22, k) for k in range(3)) / 2**22
    assert found.p_value == pytest.approx(expected)
    assert found.distinct
    # the paired difference's interval: (b - c)/n +- z sqrt(b + c - (b - c)^2/n) / n
    n, b, c = 322, 20, 2
    half = 1.959964 * math.sqrt(b + c - (b - c) ** 2 / n) / n
    assert (found.low, found.high) == pytest.approx(((b - c) / n - half, (b - c) / n + half))


def test_mcnemar_needed_samples_reach_the_power_asked() -> None:
    """At the sample count it names, a difference of the size seen is found about 80% of the
    time (Monte Carlo over draws of that many samples)."""
    first = np.array([True] * 12 + [False] * 4 + [True] * 344)  # 12 vs 4 discordant of 360
    second = np.array([False] * 12 + [True] * 4 + [True] * 344)
    found = mcnemar(first, second)
    assert not found.distinct  # p = 0.077
    needed = found.needed
    assert needed is not None and 360 < needed < 2000
    rng = np.random.default_rng(1)
    share_first, share_second = 12 / 360, 4 / 360
    detected = 0
    trials = 2000
    for _ in range(trials):
        kinds = rng.choice(3, size=needed, p=[share_first, share_second, 1 - 16 / 360])
        b, c = int(np.sum(kinds == 0)), int(np.sum(kinds == 1))
        detected += stats.binomtest(b, b + c, 0.5).pvalue < 0.05 if b + c else 0
    assert detected / trials == pytest.approx(0.8, abs=0.05)


def test_identical_outcomes_cannot_be_separated() -> None:
    same = np.array([True, False, True, True])
    found = mcnemar(same, same)
    assert (found.p_value, found.needed, found.difference) == (1.0, None, 0.0)
    values = np.array([0.1, 0.2, 0.3])
    assert paired_means(values, values).needed is None


def test_paired_means_match_scipy_ttest_rel() -> None:
    rng = np.random.default_rng(3)
    first = rng.exponential(0.02, 360)
    second = first * 0.8 + rng.normal(0, 0.004, 360)
    found = paired_means(first, second)
    expected = stats.ttest_rel(first, second)
    assert found.p_value == pytest.approx(expected.pvalue, rel=1e-9)
    interval = expected.confidence_interval(0.95)
    assert (found.low, found.high) == pytest.approx((interval.low, interval.high), rel=1e-9)
    assert found.difference == pytest.approx(float(np.mean(first - second)))


def test_mean_interval_by_hand() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0])
    found = mean_interval(values)
    # mean 2.5, sd 1.2910, t(0.975, 3) = 3.182446
    half = 3.182446 * 1.2909944 / 2
    assert (found.value, found.low, found.high) == pytest.approx((2.5, 2.5 - half, 2.5 + half))


def test_unequal_samples_are_refused() -> None:
    with pytest.raises(ValueError, match="3 and 4 samples"):
        mcnemar([True] * 3, [True] * 4)


def test_front_members_are_paired_with_their_neighbour_and_a_run_named_by_hand() -> None:
    """Three members along a front on 360 samples, each getting 5 more right than the cheaper
    one beside it and none fewer: each step is McNemar's p = 2 x 0.5^5 = 0.0625 (no member is
    distinctly better than its neighbour), while the dearest against the cheapest is
    p = 2 x 0.5^10 (distinctly better). The run's sentence says so, in that direction; the
    held-out figures come from the 200 held-out samples, not the 360 the front was chosen on."""
    from types import SimpleNamespace

    from model_explorer.results.confidence import front_confidence, indistinct_pairs

    base = np.zeros(360, dtype=bool)
    base[:300] = True
    hits = [base.copy() for _ in range(3)]
    hits[1][300:305] = True
    hits[2][300:310] = True
    front = [
        SimpleNamespace(id=7 + i, values={"weighted_bits": 30.0 + 4 * i}, extra={})
        for i in range(3)
    ]
    for index, (member, right) in enumerate(zip(front, hits, strict=True)):
        member.extra["outcomes"] = {"hits": pack_hits(right)}
        held = np.zeros(200, dtype=bool)  # on 200 held-out samples: 150, 160, 170 right
        held[: 150 + 10 * index] = True
        member.extra["held_out_outcomes"] = {"hits": pack_hits(held)}
    every = {"hits": pack_hits(np.ones(360, bool))}
    held_float = {"hits": pack_hits(np.ones(200, bool))}
    result = SimpleNamespace(
        stats={"baseline_outcomes": every, "held_out": {"outcomes": held_float}}
    )
    figures = front_confidence(result, front)
    for index, figure in enumerate(figures):  # the held-out figures from held-out outcomes
        assert figure.held_out == wilson(np.arange(200) < 150 + 10 * index)
        assert figure.held_out.samples == 200
        assert figure.held_out_against_float.only_second == 50 - 10 * index
    assert figures[0].against_cheaper is None
    for step in figures[1:]:
        paired = step.against_cheaper
        assert (paired.only_first, paired.only_second) == (5, 0)
        assert paired.p_value == pytest.approx(2 * 0.5**5) and not paired.distinct
        assert paired.difference == pytest.approx(5 / 360)
    assert [f.accuracy.value for f in figures] == pytest.approx([300 / 360, 305 / 360, 310 / 360])
    assert figures[2].against_float.only_second == 50  # the float model gets every sample
    (sentence,) = indistinct_pairs(front, figures, "top1", "weighted_bits")
    assert sentence.startswith("7, 8, 9 (30 to 38 weighted_bits): none is distinctly better")
    assert "with 360 samples (smallest p = 0.062)" in sentence
    assert f"9 is distinctly better than 7 (p = {2 * 0.5**10:.2g})" in sentence


def test_a_check_decides_by_the_paired_test_where_there_is_one() -> None:
    """Where both models kept their per-sample outcomes, the paired test decides, not the
    0.005 tolerance: 0.003 apart with all 6 discordant samples of 2,000 one way
    (p = 2 x 0.5^6 = 0.031) differs; 0.01 apart with 60 against 40 discordant samples
    (p = 0.057 by hand) does not. Without outcomes the tolerance decides."""
    from model_explorer.operations.verdicts import TOLERANCE, differs

    agree = np.ones(2000, dtype=bool)
    moved = agree.copy()
    moved[:6] = False
    close = mcnemar(moved, agree)
    assert close.p_value == pytest.approx(2 * 0.5**6)
    assert abs(close.difference) < TOLERANCE and differs(0.997, 1.0, close)
    first, second = agree.copy(), agree.copy()
    first[:40], second[40:100] = False, False
    wide = mcnemar(first, second)
    expected = 2 * sum(math.comb(100, k) for k in range(41)) / 2**100
    assert (wide.only_first, wide.only_second) == (60, 40)
    assert wide.p_value == pytest.approx(expected) and expected > 0.05
    assert abs(wide.difference) > TOLERANCE and not differs(0.98, 0.97, wide)
    assert differs(0.99, 0.98, None) and not differs(0.99, 0.987, None)
