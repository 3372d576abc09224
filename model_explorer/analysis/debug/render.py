"""A DebugReport as a CSV table, a figure and text: the layers in network order with their
SQNRs and the 10 dB line Hailo's tool flags below, the layers that explain most of the drop."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from model_explorer.fileio import atomic_path

# Hailo's tool flags a layer whose SQNR falls below this.
LOW_DB = 10.0


def write_csv(report: Any, path: Path) -> Path:
    columns = list(report.rows[0]) if report.rows else ["layer"]
    with atomic_path(path) as temporary, open(temporary, "w", newline="") as stream:
        writer = csv.DictWriter(stream, columns)
        writer.writeheader()
        for row in report.rows:
            writer.writerow(
                {k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in row.items()}
            )
    return path


def plot(report: Any, path: Path) -> Path:
    """Both SQNRs per layer (local and accumulated at its input, at its output, at the network
    output with it alone quantized; each runtime's accumulated), the 10 dB line, and below what
    restoring each layer to float gains."""
    from model_explorer.figures import pyplot, save_figure

    plt = pyplot()
    names = [row["layer"] for row in report.rows]
    figure, (top, bottom) = plt.subplots(
        2,
        1,
        figsize=(max(6.0, 0.35 * len(names) + 2), 6.5),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 1.3]},
    )
    x = range(len(names))
    lines = [
        ("accumulated_db", "accumulated, at its input (everything before quantized)", "-o"),
        ("local_db", "local, at its input (its input quantizer alone)", "--s"),
        ("output_db", "at its output (everything up to it quantized)", "-^"),
        ("network_db", "at the network output, only this layer quantized", ":d"),
    ]
    for runtime in report.runtimes:
        label = runtime.replace(":", "_")
        lines.append((f"{label}_accumulated_db", f"{runtime}: accumulated, at its input", "-x"))
    for key, label, style in lines:
        values = [_shown(row.get(key)) for row in report.rows]
        top.plot(x, values, style, label=label, markersize=4, linewidth=1)
    top.axhline(LOW_DB, color="red", linestyle="--", linewidth=1, label=f"{LOW_DB:g} dB")
    top.set_ylabel("SQNR (dB)")
    top.set_title(
        f"individual {report.individual}: accuracy {report.accuracy:.4f}"
        + ("" if report.float_accuracy is None else f", float {report.float_accuracy:.4f}")
    )
    top.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    top.grid(alpha=0.3)
    gains = [100 * row["gain"] for row in report.rows]
    bottom.bar(x, gains, color=["tab:red" if g > 0 else "tab:gray" for g in gains])
    bottom.set_ylabel("gain restored\nto float (points)")
    bottom.set_xticks(list(x))
    bottom.set_xticklabels(names, rotation=75, fontsize=7)
    bottom.grid(alpha=0.3, axis="y")
    return save_figure(figure, path, close=True)


def _shown(value: Any) -> float:
    """A figure as plotted: off-scale noiseless values capped at 100 dB."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return float("nan")
    return min(float(value), 100.0)


def text(report: Any, count: int = 5) -> str:
    """The summary: accuracy against float, how many layers fall below 10 dB, the layers that
    explain most of the drop, runtimes skipped."""
    lines = [
        f"individual {report.individual}: accuracy {report.accuracy:.4f}"
        + (
            ""
            if report.float_accuracy is None
            else f" (float {report.float_accuracy:.4f}, drop {100 * report.drop:.2f} points)"
        )
        + f"; SQNRs over {report.samples} samples"
    ]
    low = [row["layer"] for row in report.rows if row["accumulated_db"] < LOW_DB]
    if low:
        lines.append(f"accumulated SQNR below {LOW_DB:g} dB at: {', '.join(low)}")
    lines.append("layers that explain most of the drop (accuracy restored to float):")
    drop = report.drop
    for row in report.explaining(count):
        share = ""
        if drop and row["gain"] > 0:
            share = f", {100 * row['gain'] / drop:.0f}% of the drop"
        lines.append(
            f"  {row['layer']:<28} {row['input']:>6}/{row['weight']:<6} "
            f"{100 * row['gain']:+.2f} points{share}; accumulated {row['accumulated_db']:.1f} dB, "
            f"local {row['local_db']:.1f} dB, weight only {row['weight_only_db']:.1f} dB, "
            f"activation only {row['activation_only_db']:.1f} dB"
        )
    for runtime, why in report.skipped.items():
        lines.append(f"{runtime}: skipped ({why})")
    return "\n".join(lines)


def repair_text(repaired: Any, report: Any) -> str:
    """What a repair raised and what it costs, beside its parent."""
    record, search = repaired.record, repaired.search
    values = record["values"]
    costs = ", ".join(
        f"{name} {value:.4g}" for name, value in values.items() if "accuracy" not in name
    )
    raised = ", ".join(f"{name} {a}->{b}" for name, (a, b) in record["extra"]["raised"].items())
    return "\n".join(
        [
            f"repaired: individual {repaired.id} (from {report.individual}) scores "
            f"{values['accuracy']:.4f}, {search.accuracy:.4f} as far as its samples assure "
            f"it (paired with the float model), against the target {repaired.target:.4f} "
            f"({report.accuracy:.4f} before), found in {search.evaluations} evaluations",
            f"raised {len(search.raised)} quantizers: {raised}",
            f"its costs: {costs}",
            *_held_out_line(record["extra"].get("reevaluation")),
            f"appended to {repaired.path} as #{repaired.id}",
        ]
    )


def _held_out_line(reevaluation: dict[str, float] | None) -> list[str]:
    if not reevaluation:
        return []
    return [
        f"on the reevaluation data (not used by the repair): {reevaluation['repaired']:.4f}, "
        f"parent {reevaluation['parent']:.4f}"
    ]
