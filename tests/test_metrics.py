"""Accuracy functions against scikit-learn's implementations and hand-worked examples."""

from __future__ import annotations

import pytest
import torch
from sklearn.metrics import accuracy_score, jaccard_score, top_k_accuracy_score
from torch import nn

from model_explorer.datasets import TensorCache
from model_explorer.errors import UserError
from model_explorer.metrics.functions import (
    METRICS,
    MetricSpec,
    all_finite,
    create_metric,
    evaluate,
    score,
)


def test_hand_worked_top_k() -> None:
    scores = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    labels = torch.tensor([1, 1, 0, 2])
    top1, top2 = create_metric("top1"), create_metric(MetricSpec(type="topk", k=2))
    for metric in (top1, top2):
        metric.update(scores, labels)
    assert top1.compute() == 1 / 4  # only the first is right
    assert top2.compute() == 2 / 4  # the second's label is its runner-up


@pytest.mark.parametrize("k", [1, 3, 5])
def test_top_k_matches_scikit_learn(k: int) -> None:
    generator = torch.Generator().manual_seed(k)
    scores = torch.randn(500, 10, generator=generator)
    labels = torch.randint(0, 10, (500,), generator=generator)
    metric = create_metric(MetricSpec(type="topk", k=k))
    for start in range(0, 500, 64):  # accumulated over uneven batches
        metric.update(scores[start : start + 64], labels[start : start + 64])
    expected = top_k_accuracy_score(labels.numpy(), scores.numpy(), k=k, labels=list(range(10)))
    assert metric.compute() == pytest.approx(expected)


def test_segmentation_metrics_match_scikit_learn() -> None:
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 4, 5, 7, generator=generator)
    target = torch.randint(0, 4, (6, 5, 7), generator=generator)
    target[0, 0, :3] = 255  # ignored pixels
    prediction = scores.argmax(1)
    keep = target != 255
    y_true, y_pred = target[keep].numpy(), prediction[keep].numpy()
    pixel, iou = create_metric("pixel_accuracy"), create_metric("mean_iou")
    for metric in (pixel, iou):
        for start in range(0, 6, 4):
            metric.update(scores[start : start + 4], target[start : start + 4])
    assert pixel.compute() == pytest.approx(accuracy_score(y_true, y_pred))
    assert iou.compute() == pytest.approx(jaccard_score(y_true, y_pred, average="macro"))


def test_mean_iou_skips_classes_absent_from_labels_and_predictions() -> None:
    # 2x2 image, classes 0 and 1 only, of 3: IoU(0) = 1/2, IoU(1) = 2/3.
    target = torch.tensor([[[0, 0], [1, 1]]])
    prediction = torch.tensor([[[0, 1], [1, 1]]])
    scores = nn.functional.one_hot(prediction, 3).permute(0, 3, 1, 2).float()
    metric = create_metric(MetricSpec(type="mean_iou", num_classes=3))
    metric.update(scores, target)
    assert metric.compute() == pytest.approx((1 / 2 + 2 / 3) / 2)


class TwoHeads(nn.Module):
    """An early-exit style model: the second head is the first one's scores rolled by one class."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, x.roll(1, dims=1)


def test_evaluate_is_batch_invariant_and_handles_several_outputs() -> None:
    generator = torch.Generator().manual_seed(3)
    scores = torch.randn(100, 5, generator=generator)
    labels = scores.argmax(1)
    labels[:30] = (labels[:30] + 1) % 5  # 70 of 100 right for the first head
    results = [
        evaluate(TwoHeads(), TensorCache(scores, labels, batch_size), "top1")
        for batch_size in (7, 100)
    ]
    assert results[0] == results[1]
    first, second = results[0]
    assert first == pytest.approx(0.70)
    assert second == pytest.approx(
        0.30
    )  # the rolled head is right exactly where the first is off by one
    paired = evaluate(TwoHeads(), TensorCache(scores, (labels, labels), 10), "top1")
    assert paired == results[0]


def test_metric_registry_rejects_unknown_names() -> None:
    assert set(METRICS.names()) >= {"top1", "top5", "topk", "pixel_accuracy", "mean_iou"}
    with pytest.raises(UserError, match="unknown metric 'top_1' \\(did you mean 'top1'"):
        METRICS.get("top_1")


def test_agreement_top5_counts_the_float_class_among_the_five_highest() -> None:
    """Hand-made scores: the float class is the quantized top-1 in sample 0, fifth in sample
    1 and sixth in sample 2: 2 of 3 agree at top 5, 1 of 3 at top 1."""
    from model_explorer.metrics.functions import evaluate

    reference = torch.zeros(3, 8)
    reference[:, 7] = 1.0  # the float model says class 7 everywhere
    quantized = torch.tensor(
        [
            [0, 0, 0, 0, 0, 0, 0, 9.0],
            [9.0, 8, 7, 6, 0, 0, 0, 5],
            [9.0, 8, 7, 6, 5, 0, 0, 4],
        ]
    )
    batches = [(quantized, reference)]
    identity = torch.nn.Identity()
    assert evaluate(identity, batches, "agreement_top5") == pytest.approx(2 / 3)
    assert evaluate(identity, batches, "agreement") == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool]
)
def test_all_finite_agrees_with_torch_isfinite(dtype: torch.dtype) -> None:
    """`all_finite` (the smallest and largest value, one pass) against torch.isfinite on
    tensors holding no, one or several NaN, +Inf and -Inf values at random places, and on an
    empty and a 0-d tensor."""
    generator = torch.Generator().manual_seed(0)
    floating = dtype.is_floating_point
    cases = [torch.zeros(0, dtype=dtype), torch.ones((), dtype=dtype)]
    for trial in range(60):
        values = (torch.randn(7, 13, generator=generator) * 100).to(dtype)
        if floating and trial % 4:
            planted = [float("nan"), float("inf"), -float("inf")][trial % 3]
            places = torch.randint(0, values.numel(), (1 + trial % 5,), generator=generator)
            values.view(-1)[places] = planted
        cases.append(values)
    for values in cases:
        assert all_finite(values) == bool(torch.isfinite(values).all()), values
    assert any(not all_finite(values) for values in cases) is floating


def test_a_non_finite_output_stops_scoring_with_accuracy_zero() -> None:
    """A model whose second batch's output holds one NaN: scoring stops there, with accuracy 0
    after the first batch's 4 samples; with an Inf the same; finite outputs score in full."""

    class Planted(nn.Module):
        def __init__(self, value: float) -> None:
            super().__init__()
            self.value, self.calls = value, 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            out = x.clone()
            if self.calls == 2:
                out[1, 2] = self.value
            return out

    batches = [(torch.eye(4, 3), torch.zeros(4, dtype=torch.long)) for _ in range(3)]
    for value in (float("nan"), float("inf")):
        outcome = score(Planted(value), batches, "top1", check_finite=True)
        assert not outcome.finite and outcome.accuracies == [0.0] and outcome.samples == 4
    outcome = score(Planted(5.0), batches, "top1", check_finite=True)
    assert outcome.finite and outcome.samples == 12


class Fixed(nn.Module):
    """Returns the scores stored for each input row (inputs are row indices)."""

    def __init__(self, scores: torch.Tensor) -> None:
        super().__init__()
        self.scores = scores
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, index: torch.Tensor) -> torch.Tensor:
        return self.scores[index.long()]


def kl_by_torch(candidate: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """KL(reference || candidate) of the softmaxes per sample, by torch's own kl_div."""
    log_q, log_p = candidate.log_softmax(1), reference.log_softmax(1)
    return nn.functional.kl_div(log_q, log_p, log_target=True, reduction="none").sum(1)


def test_per_sample_outcomes_and_the_divergence_beside_the_metric() -> None:
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(50, 6, generator=generator)
    candidate = reference + 0.5 * torch.randn(50, 6, generator=generator)
    labels = torch.randint(0, 6, (50,), generator=generator)
    batches = TensorCache(torch.arange(50), labels, 16)  # uneven batches: 16, 16, 16, 2
    found = score(Fixed(candidate), batches, "top1", reference=reference, keep_outcomes=True)
    assert found.outcomes is not None
    assert torch.equal(found.outcomes[0], candidate.argmax(1) == labels)
    expected = kl_by_torch(candidate, reference)
    assert torch.allclose(found.divergences, expected, atol=1e-6)
    assert found.divergence == pytest.approx(float(expected.mean()), abs=1e-7)
    assert found.accuracies[0] == pytest.approx(
        float((candidate.argmax(1) == labels).float().mean())
    )
    # nothing kept unless asked for
    assert score(Fixed(candidate), batches, "top1").outcomes is None


def test_scoring_stops_once_the_divergence_cannot_come_under_its_ceiling() -> None:
    """Per-sample divergence is never negative, so the lowest reachable mean after n of N
    samples is their sum / N: scoring stops once that is above the ceiling, not at a tie."""
    generator = torch.Generator().manual_seed(1)
    reference = torch.randn(40, 5, generator=generator)
    candidate = reference + torch.randn(40, 5, generator=generator)
    labels = reference.argmax(1)
    batches = TensorCache(torch.arange(40), labels, 10)
    per_sample = kl_by_torch(candidate, reference)
    first = float(per_sample[:10].sum()) / 40  # the lowest reachable after one batch
    stopped = score(Fixed(candidate), batches, "top1", reference=reference, ceiling=first * 0.999)
    assert not stopped.complete and stopped.samples == 10
    assert stopped.divergence == pytest.approx(first, rel=1e-5)
    tie = score(Fixed(candidate), batches, "top1", reference=reference, ceiling=first * 1.0001)
    assert tie.samples > 10  # at the ceiling it may still join: it goes on


def test_agreement_keeps_hits_that_a_paired_test_counts() -> None:
    """Top-1 agreement with the float model is one hit per sample for a classifier: kept as
    hits (McNemar pairs them), and as values for a dense output, which averages positions."""
    reference = torch.tensor([[3.0, 1.0], [0.0, 2.0], [1.0, 0.0]])
    candidate = torch.tensor([[2.0, 1.0], [3.0, 2.0], [1.0, 0.0]])
    metric = create_metric("agreement")
    metric.keep_outcomes = True
    metric.update(candidate, reference)
    assert metric.outcomes().dtype == torch.bool
    assert metric.outcomes().tolist() == [True, False, True]
    dense = create_metric("agreement")
    dense.keep_outcomes = True
    dense.update(
        candidate[:, :, None, None].expand(3, 2, 2, 2),
        reference[:, :, None, None].expand(3, 2, 2, 2),
    )
    assert dense.outcomes().dtype == torch.float32


def test_early_rejection_stops_at_the_first_batch_whose_best_case_is_below_a_tied_limit() -> None:
    """On 360 samples accuracies move in steps of 1/360, and with `reject_dominated` the limit
    is a rival's accuracy: ties are common. For every limit j/360 near the final accuracy,
    scoring stops exactly after the first batch whose best case (hits so far plus every sample
    still to come, counted here by hand) is below j/360, never at a best case equal to it,
    and reports that best case; a limit the candidate reaches exactly is met."""
    misses = [0, 3, 1, 0, 2, 5, 0, 1, 2, 0]  # per batch of 36; the last batch all right
    labels = torch.arange(360) % 10
    predicted = labels.clone()
    for batch, m in enumerate(misses):  # the batch's first m samples wrong
        predicted[36 * batch : 36 * batch + m] += 1
    predicted %= 10
    scores = nn.functional.one_hot(predicted, 10).float()
    batches = TensorCache(torch.arange(360), labels, 36)
    correct = 360 - sum(misses)  # 346
    stops = set()
    for j in range(correct - 3, correct + 4):
        found = score(Fixed(scores), batches, "top1", minimum=[j / 360])
        missed = 0
        stop = None
        for k, m in enumerate(misses[:-1], start=1):  # no check after the last batch
            missed += m
            if 360 - missed < j:  # the best case: every sample still to come right
                stop = (k, 360 - missed)
                break
        if stop is None:
            assert found.complete and found.samples == 360, j
            assert found.accuracies[0] == correct / 360
        else:
            assert not found.complete and found.samples == 36 * stop[0], j
            assert found.accuracies[0] == stop[1] / 360
            stops.add(stop[0])
    assert stops == {8, 9}  # limits that stop it after different batches
    # the tie itself: the limit the candidate reaches exactly does not stop it
    tie = score(Fixed(scores), batches, "top1", minimum=[correct / 360])
    assert tie.complete and tie.accuracies[0] == correct / 360
