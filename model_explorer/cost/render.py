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
    frame["name"] = frame["name"].where(frame["name"] != "", "(model)")  # the model's own code
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
    """The legend of the printed table, by the names its headers carry (bytes shown in MiB,
    the measured seconds as each operation's share of the run)."""
    lines = []
    for name, text in CONVENTIONS.items():
        if name in _BYTES:
            name, text = name.replace("_bytes", "_mib"), text.replace("bytes", "MiB", 1)
        elif name == "seconds":
            name, text = "duration_share", DURATION_SHARE
        lines.append(f"  {name}: {text}")
    return "\n".join(lines)


DURATION_SHARE = (
    "the operation's share of the forward's measured time (median of the timed runs; "
    "indicative only on small models, where timer noise is of the same order)"
)


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


def plot_layers(
    report: CostReport,
    path: str | Path,
    depth: int | None = None,
    top: int | None = None,
    sort: str | None = None,
) -> Path:
    """`layer_figure` written to `path`."""
    return save_figure(layer_figure(report, depth, top, sort), path, dpi=120, close=True)


def layer_figure(
    report: CostReport, depth: int | None = None, top: int | None = None, sort: str | None = None
) -> Any:
    """Bars of MACs and of memory read + written per module (grouped at `depth`), in execution
    order: the `top` (default 40) largest by `sort` (default MACs, then memory) and one bar for
    all the others, so that every label stays readable."""
    import pandas as pd

    plt = pyplot()
    frame = report.to_dataframe(depth)
    frame = frame[(frame["macs"] > 0) | (frame["read_bytes"] + frame["write_bytes"] > 0)]
    frame = frame.assign(memory=frame["read_bytes"] + frame["write_bytes"])
    limit = top or 40
    if len(frame) > limit:
        column = sort if sort in frame.columns else "macs"
        ranked = frame.sort_values([column, "memory"], ascending=False, kind="stable")
        kept = frame.loc[sorted(ranked.index[:limit], key=frame.index.get_loc)]
        rest = frame.drop(kept.index)
        others = {"name": f"others ({len(rest)})", "macs": rest["macs"].sum()}
        others_row = pd.DataFrame([{**others, "memory": rest["memory"].sum()}])
        frame = pd.concat([kept, others_row], ignore_index=True)
    labels = frame["name"].where(frame["name"] != "", "(model)")
    width = min(16, max(6, 0.3 * len(frame)))
    figure, (upper, lower) = plt.subplots(2, 1, figsize=(width, 6), sharex=True)
    upper.bar(range(len(frame)), frame["macs"] / 1e6)
    upper.set_ylabel("MMACs")
    lower.bar(range(len(frame)), frame["memory"] / MIB, color="tab:orange")
    lower.set_ylabel("read + write (MiB)")
    lower.set_xticks(range(len(frame)), labels, rotation=90, fontsize=7)
    figure.tight_layout()
    return figure
