"""Rendering a Comparison: comparison.json, samples.csv (DeltaNN's per-sample records), the
agreement matrix, DeltaNN's matrices, timings, localisation plots and the printed table."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.analysis.compare.comparison import Comparison
from model_explorer.analysis.compare.deltann import sample_records, stuck
from model_explorer.analysis.compare.runs import TOP_K
from model_explorer.figures import pyplot, save_figure
from model_explorer.fileio import atomic_path

METRICS = {
    "top1_agreement": "share of samples with the same arg-max class",
    f"top{TOP_K}_agreement": f"share of samples with the same set of the {TOP_K} highest classes "
    "(k = top_k, fewer when the model has fewer classes)",
    "max_abs_error": "max |a - b| over every logit",
    "max_rel_error": "max |a - b| / max(max |a|, max |b|)",
    "cosine_similarity_mean": "mean over samples of the cosine similarity of the logit vectors",
    "cosine_similarity_min": "its minimum over the samples",
    "agree": "top1_agreement == 1 and max_rel_error <= tolerance",
    "seconds_per_sample": "median over the repeats of one pass's time / samples (after an "
    "untimed warm-up pass)",
    "bitwise_stable": "every repeat gave bitwise identical logits",
    "localisation": "per-operator relative error (as max_rel_error) of the intermediates, in "
    "execution order; first = the first above the tolerance",
    "top1_dissimilarity": "DeltaNN: share of samples whose top-1 classes differ",
    "topk_jaccard": f"DeltaNN: mean over samples of the Jaccard index of the {TOP_K} highest "
    "classes",
    "kendall_tau": f"DeltaNN: mean over samples of Kendall's tau-b of the two environments' "
    f"scores of the classes among either's {TOP_K} highest",
    "differing_samples": "DeltaNN: the samples whose top-1 classes differ",
    "label_dissimilarity": "DeltaNN: per class A predicts, the share of its samples where B "
    "predicts another",
    "anova_f, anova_p": "DeltaNN: one-way ANOVA of the two environments' times per sample (each "
    "batch's time / its size, every repeat)",
    "mean_change_percent": "DeltaNN: (mean time of B - mean time of A) / mean time of A x 100",
    "rank_score": "DeltaNN: mean over samples of its rank score, in percent: each of B's top-k "
    "classes that A has too scores 1 - |rank difference| / (2k), the sum over k",
    "stuck": "DeltaNN: more than 90% of the samples give the same ordered top-k (topk_share); "
    "class, share: the most predicted class and its share of the samples",
    "samples.csv": "per environment and sample: label, top-k classes and scores, seconds",
}
# DeltaNN's matrices in deltann.png, each the lower triangle (row against column): (key, title,
# scale: the pair's value times it, colour map, value range; None: a change of time in percent,
# shaded by the logarithm of the ratio of the times, centred on equal times).
DELTANN_MATRICES = (
    ("top1_dissimilarity", "top-1 dissimilarity, %", 100.0, "viridis_r", (0.0, None)),
    ("topk_jaccard", f"top-{TOP_K} Jaccard", 1.0, "viridis", (None, 1.0)),
    ("kendall_tau", "Kendall's tau", 1.0, "viridis", (None, 1.0)),
    ("mean_change_percent", "time, % over the column's", 1.0, "RdBu_r", None),
    ("anova_p", "ANOVA p of the times", 1.0, "viridis", (0.0, 1.0)),
)


def file_name(name: str) -> str:
    """An environment name usable in a file name (quantized:x.pkl#3 -> quantized_x.pkl_3)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "environment"


def localisation_file(a: str, b: str) -> str:
    return f"localisation_{file_name(a)}_vs_{file_name(b)}.png"


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become strings ('nan', 'inf'), numpy scalars plain."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def to_dict(comparison: Comparison, **about: Any) -> dict[str, Any]:
    """Everything of a comparison as plain data; `about` (workload, dataset, ...) goes first."""
    environments = {}
    for name, run in comparison.runs.items():
        environments[name] = {
            "description": run.description,
            "seconds_per_sample": run.median_seconds_per_sample,
            "seconds_per_sample_repeats": run.seconds_per_sample,
            "bitwise_stable": run.bitwise_stable,
            "prepare_seconds": run.prepare_seconds,
            "intermediates": run.has_intermediates,
            "top1_accuracy": run.accuracy,
            "stuck": stuck(run.logits),
        }
    pairs = []
    for pair in comparison.pairs:
        found = comparison.localisations.get((pair["a"], pair["b"]))
        if found is not None:
            found = {**found, "plot": localisation_file(pair["a"], pair["b"])}
        pairs.append({**pair, "localisation": found})
    return _plain(
        {
            **about,
            "samples": comparison.samples,
            "batch_size": comparison.batch_size,
            "repeats": comparison.repeats,
            "tolerance": comparison.tolerance,
            "environments": environments,
            "skipped": comparison.skipped,
            "pairs": pairs,
            "metrics": METRICS,
        }
    )


def agreement_matrix(
    comparison: Comparison, key: str = "top1_agreement", diagonal: float = 1.0
) -> np.ndarray:
    """N x N matrix of a pair metric; the diagonal is `diagonal` (an environment agrees with
    itself; run-to-run stability is reported separately)."""
    names = list(comparison.runs)
    matrix = np.eye(len(names)) * diagonal
    index = {n: i for i, n in enumerate(names)}
    for pair in comparison.pairs:
        i, j = index[pair["a"]], index[pair["b"]]
        matrix[i, j] = matrix[j, i] = pair[key]
    return matrix


def plot_agreement(comparison: Comparison) -> Any:
    """Top-1 agreement above the diagonal, top-k agreement (the same set of the k highest
    classes) below it: two environments may agree on every top class and on few top-5 sets."""
    plt = pyplot()
    names = list(comparison.runs)
    top1 = agreement_matrix(comparison)
    topk = agreement_matrix(comparison, f"top{TOP_K}_agreement")
    matrix = np.where(np.triu(np.ones_like(top1, dtype=bool), 1), top1, topk)
    size = 1.2 + 0.8 * len(names)
    figure, axes = plt.subplots(figsize=(size + 1.5, size))
    image = axes.imshow(matrix, vmin=min(0.0, float(matrix.min())), vmax=1.0, cmap="viridis")
    axes.set_xticks(range(len(names)), [short_name(n) for n in names], rotation=45, ha="right")
    axes.set_yticks(range(len(names)), [short_name(n) for n in names])
    for i in range(len(names)):
        for j in range(len(names)):
            color = "black" if matrix[i, j] > 0.6 else "white"
            text = "" if i == j else f"{matrix[i, j]:.3f}"
            axes.text(j, i, text, ha="center", va="center", color=color, fontsize=8)
    figure.colorbar(image, ax=axes, label="agreement")
    axes.set_title(
        f"agreement on {comparison.samples} samples: top-1 above the diagonal, top-{TOP_K} below",
        fontsize=9,
    )
    return figure


def short_name(name: str, width: int = 24) -> str:
    """An environment's name for an axis: a long `kind:RESULTS#ID` keeps its kind and its end."""
    if len(name) <= width or ":" not in name:
        return name
    kind, _, rest = name.partition(":")
    return f"{kind}:…{rest[-(width - len(kind) - 2) :]}"


def lower_triangle(comparison: Comparison, key: str) -> np.ndarray:
    """N x N matrix of a pair metric, as DeltaNN draws them: row i against column j for i > j
    (the pair (j, i): `mean_change_percent` is the row's time over the column's), NaN on and
    above the diagonal."""
    names = list(comparison.runs)
    index = {n: i for i, n in enumerate(names)}
    matrix = np.full((len(names), len(names)), np.nan)
    for pair in comparison.pairs:
        row, column = sorted((index[pair["a"]], index[pair["b"]]), reverse=True)
        value = pair.get(key, np.nan)
        if key == "mean_change_percent" and index[pair["a"]] > index[pair["b"]]:
            value = 100 * (1 / (1 + value / 100) - 1)  # the other way round
        matrix[row, column] = value
    return matrix


def plot_deltann(comparison: Comparison) -> Any:
    """DeltaNN's matrices: the lower triangle of each pair metric, three panels to a row."""
    plt = pyplot()
    names = list(comparison.runs)
    labels = [short_name(name) for name in names]
    columns = min(3, len(DELTANN_MATRICES))
    rows = -(-len(DELTANN_MATRICES) // columns)
    size = 1.8 + (0.42 if len(names) > 8 else 0.6) * len(names)
    figure, axes = plt.subplots(rows, columns, figsize=(size * columns, (size + 0.8) * rows))
    axes = np.atleast_1d(axes).ravel()
    for axis, (key, title, scale, colours, limits) in zip(axes, DELTANN_MATRICES, strict=False):
        _triangle(axis, lower_triangle(comparison, key) * scale, colours, limits, labels, key)
        axis.set_title(title)
    for axis in axes[len(DELTANN_MATRICES) :]:
        axis.set_visible(False)
    figure.suptitle(f"DeltaNN's matrices on {comparison.samples} samples (row against column)")
    figure.tight_layout()
    return figure


def _triangle(
    axis: Any, matrix: np.ndarray, colours: str, limits: Any, labels: list[str], key: str
) -> None:
    """One lower-triangle matrix with its values written in; `limits` None: a time change in
    percent, shaded by the logarithm of the ratio of the times (centred on equal times)."""
    from matplotlib.colors import Normalize, TwoSlopeNorm

    finite = matrix[np.isfinite(matrix)]
    shade = matrix
    if limits is None:
        shade = np.log10(np.maximum(1 + matrix / 100, 1e-9))
        reach = max(np.log10(2), float(np.abs(shade[np.isfinite(shade)]).max(initial=0)))
        norm: Any = TwoSlopeNorm(0.0, -reach, reach)
    else:
        low = limits[0] if limits[0] is not None else min(0.0, float(finite.min(initial=0)))
        high = limits[1] if limits[1] is not None else max(1.0, float(finite.max(initial=1)))
        norm = Normalize(low, high)
    axis.imshow(np.ma.masked_invalid(shade), cmap=colours, norm=norm)
    count = len(labels)
    axis.set_xticks(range(count - 1), labels[:-1], rotation=45, ha="right")
    axis.set_yticks(range(1, count), labels[1:])
    axis.set_xlim(-0.5, count - 1.5)
    axis.set_ylim(count - 0.5, 0.5)
    for (i, j), value in np.ndenumerate(matrix):
        if np.isfinite(value):
            text = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
            if key == "anova_p":  # a p-value below 0.001 is that, whatever its digits
                text = f"{value:.2g}" if value >= 1e-3 else "<.001"
            ink = _ink(float(norm(shade[i, j])), colours)
            axis.text(j, i, text, ha="center", va="center", fontsize=7, color=ink)


def _ink(level: float, colours: str) -> str:
    """Black on the light part of a colour map (the middle of a diverging one), white on its
    dark part."""
    if colours == "RdBu_r":
        return "black" if 0.2 < level < 0.8 else "white"
    light = level < 0.45 if colours.endswith("_r") else level > 0.55
    return "black" if light else "white"


def write_samples(comparison: Comparison, path: Path) -> Path:
    """samples.csv: one row per environment and sample (see `deltann.sample_records`)."""
    import pandas as pd

    rows = []
    for name, run in comparison.runs.items():
        rows += sample_records(name, run.logits, run.sample_seconds, comparison.targets)
    with atomic_path(path) as temporary:
        pd.DataFrame(rows).to_csv(temporary, index=False)
    return path


def plot_timing(comparison: Comparison) -> Any:
    plt = pyplot()
    names = list(comparison.runs)
    runs = [comparison.runs[n] for n in names]
    medians = np.array([r.median_seconds_per_sample for r in runs]) * 1e3
    low = medians - np.array([min(r.seconds_per_sample) for r in runs]) * 1e3
    high = np.array([max(r.seconds_per_sample) for r in runs]) * 1e3 - medians
    figure, axes = plt.subplots(figsize=(1.5 + 0.9 * len(names), 3.5))
    axes.bar(range(len(names)), medians, yerr=[low, high], capsize=4, color="tab:blue")
    for position, median in enumerate(medians):  # above the whisker, not on it
        top = (median + high[position]) * 1.04
        axes.text(position, top, f"{median:.3g}", ha="center", va="bottom", fontsize=7)
    axes.set_xticks(range(len(names)), [short_name(n) for n in names], rotation=45, ha="right")
    # a log axis: a runtime 400 times faster than another still shows its bar
    if medians.min() > 0 and medians.max() / medians.min() > 20:
        axes.set_yscale("log")
    axes.set_ylabel("ms per sample")
    axes.set_title(
        f"median of {comparison.repeats} repeats (whiskers: min to max), "
        f"batch {comparison.batch_size}"
    )
    return figure


def plot_localisation(found: dict[str, Any]) -> Any:
    plt = pyplot()
    operators = found["operators"]
    errors = [max(o["relative_error"], 1e-18) for o in operators]
    figure, axes = plt.subplots(figsize=(max(5.0, 0.28 * len(operators) + 2), 4))
    axes.semilogy(range(len(errors)), errors, marker="o")
    axes.axhline(found["tolerance"], color="tab:red", linestyle="--", label="tolerance")
    if found["first"] is not None:
        first = operators.index(found["first"])
        axes.axvline(first, color="tab:orange", label=f"first above: {found['first']['name']}")
    axes.set_xticks(range(len(operators)), [o["name"] for o in operators], rotation=90)
    axes.set_ylabel("relative error")
    title = f"{found['a']} vs {found['b']} per operator"
    if found["intermediates_of"] != [found["a"], found["b"]]:
        title += f" (intermediates of {' vs '.join(found['intermediates_of'])})"
    axes.set_title(title)
    axes.legend()
    return figure


def write_comparison(comparison: Comparison, out: Path, **about: Any) -> list[Path]:
    """comparison.json first (so that a failing plot loses nothing), then the plots."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "comparison.json"
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(to_dict(comparison, **about), indent=2, allow_nan=False))
    figures = {}
    if comparison.runs:
        figures["agreement.png"] = lambda: plot_agreement(comparison)
        figures["timing.png"] = lambda: plot_timing(comparison)
    for (a, b), found in comparison.localisations.items():
        if found["operators"]:
            figures[localisation_file(a, b)] = lambda found=found: plot_localisation(found)
    written = [path]
    if comparison.runs:
        written.append(write_samples(comparison, out / "samples.csv"))
    if len(comparison.runs) > 1:
        figures["deltann.png"] = lambda: plot_deltann(comparison)
    for name, draw in figures.items():
        written.append(save_figure(draw(), out / name, close=True))
    return written


def table(comparison: Comparison) -> str:
    """The environments' timings and stability, then every pair's metrics and localisation."""
    lines = [f"{'environment':28s} {'ms/sample':>10s} {'stable':>7s} {'top1 acc':>9s}  description"]
    for name, run in comparison.runs.items():
        accuracy = f"{run.accuracy:.4f}" if run.accuracy is not None else "-"
        lines.append(
            f"{name:28s} {run.median_seconds_per_sample * 1e3:>10.4f} "
            f"{'yes' if run.bitwise_stable else 'NO':>7s} {accuracy:>9s}  {run.description}"
        )
    for name, reason in comparison.skipped.items():
        lines.append(f"{name:28s} skipped: {reason}")
    lines.append("")
    lines.append(
        f"{'A':20s} {'B':20s} {'top1':>7s} {f'top{TOP_K}':>7s} {'max abs':>10s} "
        f"{'max rel':>10s} {'cos min':>9s}  agree"
    )
    for pair in comparison.pairs:
        lines.append(
            f"{pair['a']:20s} {pair['b']:20s} {pair['top1_agreement']:>7.4f} "
            f"{pair[f'top{TOP_K}_agreement']:>7.4f} {pair['max_abs_error']:>10.3g} "
            f"{pair['max_rel_error']:>10.3g} {pair['cosine_similarity_min']:>9.6f}  "
            f"{'yes' if pair['agree'] else 'no'}"
        )
    for (a, b), found in comparison.localisations.items():
        first = found["first"]
        where = (
            f"first above {comparison.tolerance:g}: {first['name']} "
            f"(relative error {first['relative_error']:.3g})"
            if first
            else "not localised"
        )
        note = f"; {found['note']}" if found.get("note") else ""
        lines.append(f"{a} vs {b}: {where}{note}")
    return "\n".join(lines)
