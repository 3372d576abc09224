"""Figures of results and energy analyses (matplotlib), and pgfplots export for papers.

Every plot function returns a matplotlib Figure (drawn with the Agg backend when no display is
set up); `save(figure, path)` writes PNG or PDF atomically.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.figures import pyplot, save_figure
from model_explorer.fileio import atomic_path
from model_explorer.results import ExplorationResult, Individual, with_unit


def save(figure: Any, path: str | os.PathLike[str]) -> Path:
    """Write a figure as PNG or PDF (by the suffix), atomically."""
    return save_figure(figure, path)


def cost_objective(result: ExplorationResult) -> str:
    """The objective plotted against accuracy: the first one that is not an accuracy (nor the
    divergence that ranked it)."""
    for name, _ in result.judged:
        if not name.startswith("accuracy"):
            return name
    return result.judged[0][0]


def metric_label(result: ExplorationResult, name: str) -> str:
    """How a value is shown: an 'accuracy' objective with the metric that measured it (top1,
    cosine, kl, ...) beside its name, as the tables name it: `accuracy (top1)`."""
    metric = result.problem.get("metric")
    if metric and name.startswith("accuracy") and metric != name:
        return f"{name} ({metric})"
    return with_unit(name)  # a cost's unit (results/units.py)


def front_points(result: ExplorationResult, x: str, y: str) -> list[tuple[float, float]]:
    """The Pareto front in the (x, y) plane, sorted by x: chosen as the result ranks (by the
    divergence, where it ranked the accuracy), at its x and y values."""
    front = result.pareto_front(result.ranking([x, y]))
    return sorted((i.values[x], i.values[y]) for i in front if i.feasible)


def plot_front(result: ExplorationResult, x: str | None = None, y: str = "accuracy") -> Any:
    """Every evaluated individual (feasible, infeasible, and stopped early: scored on part of
    the data, so that its score is a bound and not a measurement), the Pareto front as a step
    line, and the accuracy constraint as a horizontal line."""
    plt = pyplot()
    x = x or cost_objective(result)
    figure, axes = plt.subplots(figsize=(6, 4))
    kinds = {
        "infeasible": (lambda i: i.complete and not i.feasible, "tab:gray", "o"),
        "stopped early (score a bound)": (lambda i: not i.complete, "tab:orange", "x"),
        "feasible": (lambda i: i.complete and i.feasible, "tab:blue", "o"),
    }
    for label, (belongs, colour, marker) in kinds.items():
        chosen = [i for i in result.individuals if belongs(i)]
        if chosen:
            axes.scatter(
                [i.values[x] for i in chosen],
                [i.values[y] for i in chosen],
                s=12,
                alpha=0.6,
                color=colour,
                marker=marker,
                label=label,
                gid=f"points-{label.split(' (')[0]}",
            )
    front = front_points(result, x, y)
    if front:
        xs, ys = zip(*front, strict=True)
        axes.step(
            xs, ys, where="post", color="tab:red", marker="o", label="Pareto front", gid="front"
        )
    if y == "accuracy":
        _intervals(axes, result, x)
        _held_out(axes, result, x)
    label = metric_label(result, y)
    for constraint in result.problem.get("constraints", []):
        for bound in ("minimum", "maximum"):
            if constraint["name"] == y and constraint.get(bound) is not None:
                axes.axhline(
                    constraint[bound],
                    color="tab:green",
                    linestyle="--",
                    label=f"{bound} {result.problem.get('metric') or y}",
                    gid="constraint",
                )
    if result.individuals and not result.feasible():
        axes.set_title("no feasible individual", color="tab:red", gid="no-feasible")
    axes.set_xlabel(metric_label(result, x))
    axes.set_ylabel(label)
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def _intervals(axes: Any, result: ExplorationResult, x: str) -> None:
    """Each front member's accuracy interval (results/confidence.py) on the data it was
    selected on, and on the held-out data beside it (moved right by a hair), as error bars."""
    from model_explorer.results.confidence import front_confidence

    front = [i for i in result.pareto_front() if i.feasible]
    figures = front_confidence(result, front)
    costs = [member.values[x] for member in front]
    nudge = 0.008 * (max(costs) - min(costs)) if costs else 0.0
    shown = (("accuracy", "tab:red", 0.0, ""), ("held_out", "tab:purple", nudge, " (held out)"))
    for which, colour, shift, label in shown:
        bars = [
            (m.values[x] + shift, getattr(f, which)) for m, f in zip(front, figures, strict=True)
        ]
        bars = [(at, e) for at, e in bars if e is not None]
        if not bars:
            continue
        axes.errorbar(
            [at for at, _ in bars],
            [e.value for _, e in bars],
            yerr=[[e.value - e.low for _, e in bars], [e.high - e.value for _, e in bars]],
            fmt="none",
            ecolor=colour,
            alpha=0.5,
            capsize=2,
            label=f"95% interval{label}",
            gid=f"intervals{label.replace(' (held out)', '-held-out')}",
        )


def _held_out(axes: Any, result: ExplorationResult, x: str) -> None:
    """The front members' scores on the held-out data (operations/held_out.py), each joined to
    its score on the exploration data, and the float model's held-out score."""
    members = [i for i in result.pareto_front() if "held_out" in i.extra]
    if not members:
        return
    for member in members:
        axes.plot(
            [member.values[x]] * 2,
            [member.values["accuracy"], member.extra["held_out"]],
            color="tab:purple",
            linestyle=":",
            linewidth=1,
        )
    axes.scatter(
        [m.values[x] for m in members],
        [m.extra["held_out"] for m in members],
        s=30,
        marker="D",
        facecolors="none",
        edgecolors="tab:purple",
        label="front on held-out data",
        gid="held-out",
        zorder=3,
    )
    held = result.stats.get("held_out")
    if held:
        axes.axhline(
            held["baseline"],
            color="tab:purple",
            linestyle="--",
            linewidth=1,
            label="float model on held-out data",
            gid="held-out-baseline",
        )


def _layer_table(result: ExplorationResult, individual: Individual | None):  # noqa: ANN202
    individuals = [individual] if individual is not None else None
    return result.layer_statistics(individuals)


def layer_labels(result: ExplorationResult, layers: list[str]) -> list[str]:
    """Tick labels of layers: a name that is only a position (`0`, `features.3`, as in an
    nn.Sequential) gets its layer type (`0:Conv2d`); results written before types were
    stored keep the names."""
    types = result.problem.get("layer_types", {})
    return [
        f"{name}:{types[name]}" if name in types and name.rpartition(".")[2].isdigit() else name
        for name in layers
    ]


def plot_layers(result: ExplorationResult, individual: Individual | None = None) -> Any:
    """Per-layer settings: bit widths (input and weight side by side) or thresholds, for one
    individual or over the Pareto front (the median member's, the range as whiskers: a mean
    would draw widths no member has); in a formats search each bar is coloured by its format
    (the most frequent over the front), weights hatched, its height the format's bits per
    element."""
    plt = pyplot()
    table = _layer_table(result, individual)
    layers = list(dict.fromkeys(table["layer"]))
    kinds = list(dict.fromkeys(table["kind"]))
    formats = sorted(table["format"].dropna().unique()) if "format" in table else []
    palette = dict(zip(formats, plt.get_cmap("tab10").colors, strict=False))
    figure, axes = plt.subplots(figsize=(max(6, 0.4 * len(layers) * len(kinds)), 4))
    width = 0.8 / len(kinds)
    for offset, kind in enumerate(kinds):
        part = table[table["kind"] == kind].set_index("layer").reindex(layers)
        positions = np.arange(len(layers)) + (offset - (len(kinds) - 1) / 2) * width
        style: dict[str, Any] = {"label": kind}
        if formats:
            style = {
                "color": [palette.get(f, "0.8") for f in part["format"]],
                "hatch": "///" if kind == "weight" else None,
                "edgecolor": "white",
            }
        middle = part["median"].fillna(0).astype(float)
        spread = [middle - part["min"].fillna(0), part["max"].fillna(0) - middle]
        error = None if individual is not None else spread
        axes.bar(positions, middle, width, yerr=error, capsize=2, gid=f"bars-{kind}", **style)
    axes.set_xticks(range(len(layers)), layer_labels(result, layers), rotation=90, fontsize=7)
    axes.set_xlabel("layer")
    title = (
        f"individual {individual.id}"
        if individual is not None
        else "the front's median member, whiskers: lowest to highest"
        if result.feasible()
        else "the infeasible front's median member (no feasible individual)"
    )
    axes.set_title(title + ("\ncoloured by the most frequent format" if formats else ""))
    unit = "value" if "threshold" in kinds else "bits"
    axes.set_ylabel("bits per element (scales counted)" if formats else unit)
    handles = _format_legend(palette, kinds) if formats else None
    # beside the bars, not over the whiskers that reach the top
    axes.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    return figure


def _format_legend(palette: dict[str, Any], kinds: list[str]) -> list[Any]:
    """A patch per format, then the plain input and hatched weight bars."""
    from matplotlib.patches import Patch

    handles = [Patch(color=colour, label=name) for name, colour in palette.items()]
    for kind in kinds:
        hatch = "///" if kind == "weight" else None
        handles.append(Patch(facecolor="0.85", edgecolor="0.4", hatch=hatch, label=kind))
    return handles


def reference_text(reference: dict[str, float]) -> str:
    """The reference point as figures and the report state it."""
    point = ", ".join(f"{name} {value:.6g}" for name, value in reference.items())
    return f"reference point: {point}; ideal: 1 and 0"


def plot_convergence(result: ExplorationResult, reference: dict[str, float] | None = None) -> Any:
    """Normalised hypervolume (`ExplorationResult.normalised_hypervolume`) of everything
    evaluated up to each generation, its reference point in the title."""
    plt = pyplot()
    reference = reference or result.default_reference()
    history = result.hypervolume_by_generation(reference, normalised=True)
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot([g for g, _ in history], [h for _, h in history], marker=".", gid="hypervolume")
    axes.set_xlabel("generation")
    axes.xaxis.get_major_locator().set_params(integer=True)  # no generation 2.5
    axes.set_ylabel("hypervolume (normalised)")
    axes.set_title(reference_text(reference), fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def plot_efficiency(result: ExplorationResult, reference: dict[str, float] | None = None) -> Any:
    """Hypervolume of the feasible front against the samples forwarded to find it: what the
    search bought for its cost (see `ExplorationResult.hypervolume_by_samples`), normalised."""
    plt = pyplot()
    reference = reference or result.default_reference()
    history = result.hypervolume_by_samples(reference, normalised=True)
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.step(
        [s for s, _ in history], [h for _, h in history], where="post", gid="hypervolume-samples"
    )
    seeding = result.stats.get("sensitivity_forwards", 0)  # spent before the first evaluation
    if seeding:
        label = f"sensitivity seeds ({seeding:,})"
        axes.axvspan(0, seeding, color="0.9", label=label, gid="sensitivity-seeds")
        axes.legend(loc="lower right", fontsize=8)
    axes.set_xlim(left=0)
    axes.set_xlabel("sample-forwards")
    axes.set_ylabel("hypervolume (normalised)")
    axes.set_title(reference_text(reference), fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    return figure


def plot_dram_energy(rows: Sequence[Any]) -> Any:
    """Per-layer DRAM energy (uJ, as energy-analysis prints it) of weights, inputs and
    outputs, stacked, from energy rows (`LayerEnergy`, or dicts with the CSV's columns, whose
    energies are pJ); each layer named by its index, name and type, as the printed table."""
    plt = pyplot()

    def value(row: Any, key: str) -> Any:
        return row[key] if isinstance(row, dict) else getattr(row, key)

    names = [
        f"{value(r, 'layer_idx')}: {value(r, 'layer_name') or ''} ({value(r, 'layer_type')})"
        for r in rows
    ]
    figure, axes = plt.subplots(figsize=(max(6, 0.35 * len(rows)), 4))
    bottom = np.zeros(len(rows))
    for key, label in (("w_energy", "weights"), ("i_energy", "inputs"), ("o_energy", "outputs")):
        heights = np.array([float(value(r, key)) / 1e6 for r in rows])
        axes.bar(range(len(rows)), heights, bottom=bottom, label=label, gid=f"energy-{label}")
        bottom += heights
    axes.set_xticks(range(len(rows)), names, rotation=90, fontsize=7)
    axes.set_xlabel("layer (index: name (type))")
    axes.set_ylabel("DRAM energy (uJ)")
    word = int(value(rows[0], "bitwidth")) if rows else 0
    axes.set_title(
        f"DRAM energy per layer: {bottom.sum():.4g} uJ in all, words of {word} bits", fontsize=9
    )
    axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


# -- pgfplots -----------------------------------------------------------------------------
def _write(path: Path, text: str) -> Path:
    with atomic_path(path) as temporary:
        temporary.write_text(text)
    return path


def to_pgfplots(
    stem: str | os.PathLike[str],
    columns: dict[str, Sequence[Any]],
    x: str,
    y: str,
    kind: str = "front",
    xlabel: str | None = None,
    ylabel: str | None = None,
) -> tuple[Path, Path]:
    """Write `<stem>.dat` (whitespace-separated columns with a header) and `<stem>.tex` (a
    pgfplots axis reading it): a step line for a front, or bars (`kind="bars"`)."""
    stem = Path(stem)
    names = list(columns)
    rows = zip(*(columns[n] for n in names), strict=True)
    data = (
        " ".join(names) + "\n" + "\n".join(" ".join(_cell(v) for v in row) for row in rows) + "\n"
    )
    dat = _write(stem.with_suffix(".dat"), data)
    if kind == "bars":
        plot = f"\\addplot[ybar, fill=blue!40] table[x expr=\\coordindex, y={y}] {{{dat.name}}};"
        extra = (
            f"xticklabels from table={{{dat.name}}}{{{x}}}, xtick=data, "
            "x tick label style={rotate=90},"
        )
    else:
        plot = f"\\addplot[const plot, mark=*, red] table[x={x}, y={y}] {{{dat.name}}};"
        extra = ""
    tex = (
        "% pgfplots figure written by model_explorer; \\input this file inside a tikzpicture.\n"
        f"\\begin{{axis}}[xlabel={{{xlabel or x}}}, ylabel={{{ylabel or y}}}, {extra} grid=major]\n"
        f"  {plot}\n"
        "\\end{axis}\n"
    )
    return dat, _write(stem.with_suffix(".tex"), tex)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return repr(round(value, 10))
    return str(value).replace(" ", "_")


def front_to_pgfplots(
    result: ExplorationResult,
    stem: str | os.PathLike[str],
    x: str | None = None,
    y: str = "accuracy",
) -> tuple[Path, Path]:
    """The Pareto front in the (x, y) plane as a pgfplots .dat/.tex pair."""
    x = x or cost_objective(result)
    points = front_points(result, x, y)
    return to_pgfplots(stem, {x: [p[0] for p in points], y: [p[1] for p in points]}, x, y)


def layers_to_pgfplots(
    result: ExplorationResult, stem: str | os.PathLike[str], individual: Individual | None = None
) -> tuple[Path, Path]:
    """Per-variable settings (one individual, or the front's median member) as bars."""
    table = _layer_table(result, individual)
    return to_pgfplots(
        stem,
        {"variable": list(table["variable"]), "value": list(table["median"])},
        "variable",
        "value",
        kind="bars",
    )
