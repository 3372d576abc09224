"""DeltaNN's view of a comparison (luludak/DeltaNN, ICSME 2023): what each environment predicted
for each sample, and per pair of environments how often and where the predictions differ and
whether one is slower.

Per sample and environment (`sample_records`): the k highest classes with their scores and the
sample's time. Per pair (A, B) over the same samples (`prediction_metrics`):

- `top1_dissimilarity`: share of samples whose top-1 classes differ (1 - top-1 agreement;
  DeltaNN prints it in percent);
- `topk_jaccard`: mean over samples of |A_k ∩ B_k| / |A_k ∪ B_k| of the k highest classes;
- `kendall_tau`: mean over samples of Kendall's tau-b between A's and B's scores of the classes
  in A_k ∪ B_k (how alike the two rankings of the candidates are; 1: the same order). DeltaNN's
  code hands scipy the two lists of class IDs paired by rank position, which measures how the
  IDs sort, not the rankings; this is the rank correlation its name promises;
- `rank_score`: DeltaNN's rank score, mean over samples: each of B's top-k classes that A has
  too scores 1 - |rank difference| / (2k), the sum over k, in percent;
- `differing_samples`: the samples whose top-1 differs;
- `label_dissimilarity`: per class that A predicts, the share of those samples where B predicts
  another class.

`stuck(logits)` is DeltaNN's check of a broken ("stuck") model: more than 90% of the samples
give the same top-k. Per pair, `timing_statistics` compares the samples' times: one-way ANOVA
(F and p, scipy.stats.f_oneway) and the change of the mean time from A to B in percent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TOP_K = 5


def top_k(logits: np.ndarray, k: int = TOP_K) -> tuple[np.ndarray, np.ndarray]:
    """(classes, scores) of the k highest scores of each sample, highest first (ties: lower
    class first)."""
    k = min(k, logits.shape[1])
    classes = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return classes, np.take_along_axis(logits, classes, axis=1)


def _kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b of two score vectors over the same items (1 where both are constant)."""
    from scipy.stats import kendalltau

    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 1.0
    tau = kendalltau(a, b).statistic
    return float(tau) if np.isfinite(tau) else 0.0


def prediction_metrics(a: np.ndarray, b: np.ndarray, k: int = TOP_K) -> dict[str, Any]:
    """The pair metrics of two environments' logits (samples x classes), see the module text."""
    top_a, _ = top_k(a, k)
    top_b, _ = top_k(b, k)
    jaccard, tau, ranks = [], [], []
    for row_a, row_b, scores_a, scores_b in zip(top_a, top_b, a, b, strict=True):
        union = np.union1d(row_a, row_b)
        jaccard.append(len(np.intersect1d(row_a, row_b)) / len(union))
        tau.append(_kendall_tau(scores_a[union], scores_b[union]))
        ranks.append(rank_score(row_a, row_b))
    first_a, first_b = top_a[:, 0], top_b[:, 0]
    differing = np.flatnonzero(first_a != first_b)
    labels = {
        int(label): float(np.mean(first_b[first_a == label] != label))
        for label in np.unique(first_a)
    }
    return {
        "top1_dissimilarity": float(np.mean(first_a != first_b)),
        "topk_jaccard": float(np.mean(jaccard)),
        "kendall_tau": float(np.mean(tau)),
        "rank_score": float(np.mean(ranks)),
        "differing_samples": differing.tolist(),
        "label_dissimilarity": labels,
    }


# DeltaNN's stuck-model rule: more than 90 of 100 images give the first image's top-5.
STUCK_SHARE = 0.9


def stuck(logits: np.ndarray, k: int = TOP_K) -> dict[str, Any]:
    """DeltaNN's check of a broken model: `stuck` when more than 90% of the samples give the
    same ordered top-k (as the most common one); with the share of that top-k, and the most
    predicted class and the share of samples it takes."""
    classes, _ = top_k(logits, k)
    _, top_counts = np.unique(classes, axis=0, return_counts=True)
    topk_share = float(top_counts.max() / len(classes))
    labels, counts = np.unique(classes[:, 0], return_counts=True)
    most = int(np.argmax(counts))
    return {
        "stuck": len(classes) > 1 and topk_share > STUCK_SHARE,
        "topk_share": topk_share,
        "class": int(labels[most]),
        "share": float(counts[most] / len(classes)),
    }


def rank_score(a: np.ndarray, b: np.ndarray) -> float:
    """DeltaNN's rank score of two samples' top-k lists (classes, highest first), in percent:
    each class of B that A has too scores 1 - |rank in A - rank in B| / (2k); the sum over k."""
    positions = {int(label): rank for rank, label in enumerate(a)}
    total = sum(
        1 - abs(positions[int(label)] - rank) / (2 * len(a))
        for rank, label in enumerate(b)
        if int(label) in positions
    )
    return total / len(a) * 100


def timing_statistics(seconds_a: np.ndarray, seconds_b: np.ndarray) -> dict[str, float]:
    """One-way ANOVA of the two environments' per-sample times (F, p) and the change of the
    mean from A to B in percent (positive: B is slower)."""
    from scipy.stats import f_oneway

    mean_a, mean_b = float(np.mean(seconds_a)), float(np.mean(seconds_b))
    if np.ptp(seconds_a) == 0 and np.ptp(seconds_b) == 0:
        f_value, p_value = (0.0, 1.0) if mean_a == mean_b else (float("inf"), 0.0)
    else:
        result = f_oneway(seconds_a, seconds_b)
        f_value, p_value = float(result.statistic), float(result.pvalue)
    change = (mean_b - mean_a) / mean_a * 100 if mean_a > 0 else float("nan")
    return {"anova_f": f_value, "anova_p": p_value, "mean_change_percent": change}


def sample_records(
    name: str, logits: np.ndarray, seconds: np.ndarray | None, targets: Any = None, k: int = TOP_K
) -> list[dict[str, Any]]:
    """One row per sample of one environment: its label where `targets` are labels, or where
    they are the float model's outputs (a label-free metric: agreement, cosine, kl) that
    reference's k highest classes; then the k highest classes and their scores, its time in
    seconds."""
    classes, scores = top_k(logits, k)
    labels = reference = None
    if targets is not None:
        targets = np.asarray(targets)
        if targets.ndim == 1:
            labels = targets
        elif targets.ndim == 2 and len(targets) == len(logits):
            reference = top_k(targets.astype(np.float64), k)[0]
    rows = []
    for index in range(len(logits)):
        row: dict[str, Any] = {"environment": name, "sample": index}
        if labels is not None:
            row["label"] = int(labels[index])
        if reference is not None:
            for rank in range(reference.shape[1]):
                row[f"reference_top{rank + 1}"] = int(reference[index, rank])
        for rank in range(classes.shape[1]):
            row[f"top{rank + 1}"] = int(classes[index, rank])
            row[f"score{rank + 1}"] = float(scores[index, rank])
        row["seconds"] = None if seconds is None else float(seconds[index])
        rows.append(row)
    return rows
