"""DeltaNN's metrics of a comparison against computations written out by hand: sets for the
Jaccard index, pair counting for Kendall's tau-b, the ANOVA F ratio from its sums of squares."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import f as f_distribution

from model_explorer.analysis.compare import compare, write_comparison
from model_explorer.analysis.compare.deltann import (
    prediction_metrics,
    rank_score,
    sample_records,
    stuck,
    timing_statistics,
    top_k,
)


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b by counting pairs: (concordant - discordant) / sqrt((n0 - ties in x) *
    (n0 - ties in y))."""
    concordant = discordant = ties_x = ties_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
        if dx == 0 and dy == 0:
            ties_x, ties_y = ties_x + 1, ties_y + 1
        elif dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif dx == dy:
            concordant += 1
        else:
            discordant += 1
    pairs = len(x) * (len(x) - 1) // 2
    return (concordant - discordant) / np.sqrt((pairs - ties_x) * (pairs - ties_y))


def random_logits(seed: int, samples: int = 12, classes: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(samples, classes))


def test_the_prediction_metrics_equal_the_hand_computations() -> None:
    a = random_logits(0)
    b = a + 0.8 * random_logits(1)  # a noisy variant: some top-1 and top-5 sets change
    found = prediction_metrics(a, b, k=5)
    jaccard, tau = [], []
    for row_a, row_b in zip(a, b, strict=True):
        first = set(np.argsort(-row_a)[:5].tolist())
        second = set(np.argsort(-row_b)[:5].tolist())
        jaccard.append(len(first & second) / len(first | second))
        union = sorted(first | second)
        tau.append(kendall_tau_b(row_a[union].tolist(), row_b[union].tolist()))
    differing = [i for i in range(len(a)) if a[i].argmax() != b[i].argmax()]
    assert 0 < len(differing) < len(a)  # the planted noise changes some predictions, not all
    assert found["differing_samples"] == differing
    assert found["top1_dissimilarity"] == pytest.approx(len(differing) / len(a))
    assert found["topk_jaccard"] == pytest.approx(np.mean(jaccard))
    assert found["kendall_tau"] == pytest.approx(np.mean(tau))
    for label, share in found["label_dissimilarity"].items():
        mine = [i for i in range(len(a)) if a[i].argmax() == label]
        assert share == pytest.approx(sum(i in differing for i in mine) / len(mine))


def test_an_environment_agrees_with_itself_and_a_reversed_ranking_scores_minus_one() -> None:
    a = random_logits(2)
    same = prediction_metrics(a, a.copy())
    assert same["top1_dissimilarity"] == 0 and same["differing_samples"] == []
    assert same["topk_jaccard"] == 1 and same["kendall_tau"] == pytest.approx(1)
    assert prediction_metrics(a, -a, k=a.shape[1])["kendall_tau"] == pytest.approx(-1)


def test_a_model_that_gives_one_top5_for_everything_is_stuck() -> None:
    """DeltaNN's rule: more than 90 of 100 samples with the same ordered top-5."""
    constant = np.tile(np.arange(8.0), (100, 1))  # a broken model: the same scores everywhere
    constant[:9] = random_logits(6, samples=9)  # 91 of 100 alike: stuck
    found = stuck(constant)
    assert found["stuck"] is True and found["topk_share"] == 0.91 and found["class"] == 7
    constant[9] = random_logits(7, samples=1)  # 90 of 100: not more than 90%
    assert stuck(constant)["stuck"] is False
    one_class = random_logits(3)
    one_class[:, 4] += 100  # one top-1 class, but the rest of the top-5 varies
    assert stuck(one_class) == {**stuck(one_class), "stuck": False, "class": 4, "share": 1.0}


def test_the_rank_score_equals_deltanns_definition_by_hand() -> None:
    # B shares 4 of A's 5 classes; ranks (0-based) of the shared ones: 0->0, 1->2, 2->1, 3->3.
    a = np.array([541, 98, 12, 7, 300])
    b = np.array([541, 12, 98, 7, 301])
    expected = (1 + (1 - 1 / 10) + (1 - 1 / 10) + 1 + 0) / 5 * 100
    assert rank_score(a, b) == pytest.approx(expected)
    assert rank_score(a, a) == pytest.approx(100)


def test_the_timing_statistics_equal_the_anova_written_out() -> None:
    rng = np.random.default_rng(5)
    a, b = rng.normal(1.0, 0.1, 40), rng.normal(1.1, 0.1, 50)
    found = timing_statistics(a, b)
    everything = np.concatenate([a, b])
    between = (
        len(a) * (a.mean() - everything.mean()) ** 2 + len(b) * (b.mean() - everything.mean()) ** 2
    )
    within = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()
    f_value = (between / 1) / (within / (len(everything) - 2))
    assert found["anova_f"] == pytest.approx(f_value)
    assert found["anova_p"] == pytest.approx(f_distribution.sf(f_value, 1, len(everything) - 2))
    assert found["mean_change_percent"] == pytest.approx((b.mean() - a.mean()) / a.mean() * 100)


def test_sample_records_hold_the_top_classes_scores_and_times() -> None:
    logits = np.array([[0.1, 3.0, 2.0], [5.0, -1.0, 4.0]])
    rows = sample_records("eager", logits, np.array([0.5, 0.25]), np.array([1, 2]), k=2)
    assert rows[0] == {
        "environment": "eager",
        "sample": 0,
        "label": 1,
        "top1": 1,
        "score1": 3.0,
        "top2": 2,
        "score2": 2.0,
        "seconds": 0.5,
    }
    assert rows[1]["top1"] == 0 and rows[1]["top2"] == 2 and rows[1]["seconds"] == 0.25
    classes, _ = top_k(logits, 5)
    assert classes.shape == (2, 3)  # k is capped at the number of classes


def test_compare_writes_the_per_sample_records_and_the_pair_metrics(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    inputs, targets = torch.randn(24, 1, 8, 8), torch.randint(0, 10, (24,))
    comparison = compare(model, inputs, ["eager", "half"], targets, batch_size=1, repeats=2)
    write_comparison(comparison, tmp_path)
    samples = pd.read_csv(tmp_path / "samples.csv")
    assert len(samples) == 48 and set(samples["environment"]) == {"eager", "half"}
    assert (samples["label"].to_numpy()[:24] == targets.numpy()).all()
    assert (samples["seconds"] > 0).all()
    (pair,) = json.loads((tmp_path / "comparison.json").read_text())["pairs"]
    eager = samples[samples["environment"] == "eager"]
    half = samples[samples["environment"] == "half"]
    dissimilarity = np.mean(eager["top1"].to_numpy() != half["top1"].to_numpy())
    assert pair["top1_dissimilarity"] == pytest.approx(dissimilarity)
    # Batches of one, two repeats: 24 x 2 measurements per environment behind the statistics.
    runs = comparison.runs
    assert len(runs["eager"].timings) == 48
    change = (runs["half"].timings.mean() / runs["eager"].timings.mean() - 1) * 100
    assert pair["mean_change_percent"] == pytest.approx(change)
    assert pair["anova_p"] == pytest.approx(
        timing_statistics(runs["eager"].timings, runs["half"].timings)["anova_p"]
    )
    assert (tmp_path / "deltann.png").exists()


def test_the_matrices_are_the_lower_triangle_row_against_column() -> None:
    """DeltaNN's matrices: row i against column j below the diagonal; the time change is the
    row's time over the column's, written out from the pair's mean times."""
    from model_explorer.analysis.compare.comparison import Comparison
    from model_explorer.analysis.compare.render import lower_triangle

    runs = {name: None for name in ("a", "b", "c")}
    times = {"a": 2.0, "b": 3.0, "c": 1.0}
    pairs = [
        {
            "a": x,
            "b": y,
            "top1_dissimilarity": value,
            "mean_change_percent": (times[y] - times[x]) / times[x] * 100,
        }
        for x, y, value in (("a", "b", 0.1), ("a", "c", 0.2), ("b", "c", 0.3))
    ]
    comparison = Comparison(runs, {}, pairs, 10, 1, 1, 1e-4)  # type: ignore[arg-type]
    dissimilarity = lower_triangle(comparison, "top1_dissimilarity")
    assert np.isnan(dissimilarity[np.triu_indices(3)]).all()
    assert dissimilarity[1, 0] == 0.1 and dissimilarity[2, 0] == 0.2 and dissimilarity[2, 1] == 0.3
    change = lower_triangle(comparison, "mean_change_percent")
    assert change[2, 1] == pytest.approx((1.0 / 3.0 - 1) * 100)  # c over b
    reversed_pairs = [{**pair, "a": pair["b"], "b": pair["a"]} for pair in pairs]
    for pair in reversed_pairs:  # the same pairs listed the other way round
        pair["mean_change_percent"] = (times[pair["b"]] - times[pair["a"]]) / times[pair["a"]] * 100
    turned = Comparison(runs, {}, reversed_pairs, 10, 1, 1, 1e-4)  # type: ignore[arg-type]
    assert np.allclose(lower_triangle(turned, "mean_change_percent"), change, equal_nan=True)


def test_localisation_against_one_reference_only() -> None:
    import torch

    from model_explorer.errors import UserError

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.ReLU(), torch.nn.Linear(12, 10))
    inputs = torch.randn(32, 16)
    envs = ["eager", "half", "bfloat16"]
    everything = compare(model, inputs, envs, repeats=1)
    assert set(everything.localisations) == {
        ("eager", "half"),
        ("eager", "bfloat16"),
        ("half", "bfloat16"),
    }
    against = compare(model, inputs, envs, repeats=1, localise_against="half")
    assert set(against.localisations) == {("eager", "half"), ("half", "bfloat16")}
    with pytest.raises(UserError, match="'fp16' is not one of the environments"):
        compare(model, inputs, envs, repeats=1, localise_against="fp16")
