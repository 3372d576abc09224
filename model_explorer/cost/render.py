"""Rendering of cost reports: text tables, CSV/JSON, and per-layer bar plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model_explorer.cost.analyze import CONVENTIONS, CostReport
from model_explorer.figures import pyplot, save_figure
from model_explorer.fileio import atomic_path

MIB = 2**20
_BYTES = ("read_bytes", "write_bytes", "storage_bytes", "inference_bytes")


def cost_frame(
    report: CostReport, depth: int | None = None, sort: str | None = None, top: int | None = None
):  # noqa: ANN201
    """The report's rows in MiB, optionally grouped by module depth, sorted and cut."""
    frame = report.to_dataframe(depth)
    if frame.empty:
        return frame
    for column in _BYTES:
        frame[column.replace("_bytes", "_mib")] = frame.pop(column) / MIB
    frame = frame.drop(columns=["seconds"])
    if sort:
        key = sort if sort in frame.columns else sort.replace("_bytes", "_mib")
        if key not in frame.columns:
            from model_explorer.errors import UserError

            raise UserError(f"--sort: no column '{sort}'; columns: {', '.join(frame.columns)}")
        frame = frame.sort_values(key, ascending=False, kind="stable")
    return frame.head(top) if top else frame


def totals_text(report: CostReport) -> str:
    totals = report.totals
    attention = totals["attention_macs"]
    fused = f" + attention MACs {attention:,} in fused kernels" if attention else ""
    return (
        f"totals ({report.level}, input {tuple(report.input_shape)}): "
        f"params {totals['params']:,}, MACs {totals['macs']:,} ({totals['macs'] / 1e9:.4f} G)"
        f"{fused}, other ops {totals['other_ops']:,}, "
        f"storage {totals['storage_bytes'] / MIB:.2f} MiB, "
        f"inference memory {totals['inference_bytes'] / MIB:.2f} MiB, "
        f"read + write {(totals['read_bytes'] + totals['write_bytes']) / MIB:.2f} MiB"
    )


def conventions_text() -> str:
    return "\n".join(f"  {name}: {text}" for name, text in CONVENTIONS.items())


def write_json(report: CostReport, path: str | Path) -> None:
    data: dict[str, Any] = {
        "level": report.level,
        "input_shape": list(report.input_shape),
        "conventions": report.conventions,
        "totals": report.totals,
        "rows": report.to_dataframe().to_dict(orient="records"),
    }
    with atomic_path(path) as temporary:
        temporary.write_text(json.dumps(data, indent=2))


def plot_layers(report: CostReport, path: str | Path, depth: int | None = None) -> Path:
    """Bars of MACs and of memory read + written per module (grouped at `depth`)."""
    plt = pyplot()
    frame = report.to_dataframe(depth)
    frame = frame[(frame["macs"] > 0) | (frame["read_bytes"] + frame["write_bytes"] > 0)]
    labels = frame["name"].where(frame["name"] != "", "(model)")
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, 0.25 * len(frame)), 6), sharex=True)
    top.bar(range(len(frame)), frame["macs"] / 1e6)
    top.set_ylabel("MMACs")
    bottom.bar(
        range(len(frame)), (frame["read_bytes"] + frame["write_bytes"]) / MIB, color="tab:orange"
    )
    bottom.set_ylabel("read + write (MiB)")
    bottom.set_xticks(range(len(frame)), labels, rotation=90, fontsize=7)
    figure.tight_layout()
    return save_figure(figure, path, dpi=120, close=True)
