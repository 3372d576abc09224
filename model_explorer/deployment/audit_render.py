"""The export-fidelity audit (deployment/audit.py) rendered: as aligned text for the command
line, as markdown for report.md, its warnings one line each; and the audits of a result's
checked individuals, kept in one JSON file beside the result (`<results>_deployment_audit.json`,
by individual id) that export --check and evaluate-individual --backend update and report.md
reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from model_explorer.deployment.audit import FidelityAudit
from model_explorer.fileio import atomic_path


def notes(audit: FidelityAudit) -> list[str]:
    """One line per runtime that runs every product in float, where a layer asked 8-bit
    integers (not a warning: it has no integer kernels for the file)."""
    asked = any(row.asked.eight_bit_integer for row in audit.rows)
    return [
        f"note: {run.label} runs every product in float: {run.float_only}"
        for run in audit.runtimes
        if run.float_only and asked
    ]


def warning_lines(audit: FidelityAudit) -> list[str]:
    return [warning.text for warning in audit.warnings]


def _cells(audit: FidelityAudit) -> tuple[list[str], list[list[str]]]:
    header = ["layer", "asked", *(run.label for run in audit.runtimes)]
    body = [
        [row.layer, row.asked.text, *(row.cell(run.label) for run in audit.runtimes)]
        for row in audit.rows
    ]
    return header, body


def audit_table(audit: FidelityAudit) -> str:
    """The audit as aligned text: one row per layer, a column per runtime."""
    header, body = _cells(audit)
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    )


def audit_markdown(audit: FidelityAudit) -> str:
    """The audit as a markdown table, its warnings and notes as a list under it."""
    header, body = _cells(audit)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join([f"`{row[0]}`", *row[1:]]) + " |" for row in body]
    said = warning_lines(audit) + notes(audit)
    return "\n".join(lines + ([""] + [f"- {line}" for line in said] if said else []))


def audits_path(results: str | Path) -> Path:
    """Where the audits of a result file's checked individuals are kept: beside it."""
    path = Path(results)
    return path.with_name(f"{path.stem}_deployment_audit.json")


def read_audits(results: str | Path) -> dict[int, FidelityAudit]:
    """Individual id -> its audit, as last recorded for the result file; empty where none is."""
    path = audits_path(results)
    if not path.is_file():
        return {}
    stored = json.loads(path.read_text())
    return {int(key): FidelityAudit.from_dict(value) for key, value in stored.items()}


def record_audits(results: str | Path, audits: Mapping[int, FidelityAudit]) -> Path:
    """Record `audits` (by individual id) beside the result file, replacing earlier audits of
    the same individuals and keeping the others; the file written."""
    kept = read_audits(results)
    kept.update(audits)
    path = audits_path(results)
    with atomic_path(path) as temporary:
        ordered = {str(key): kept[key].to_dict() for key in sorted(kept)}
        temporary.write_text(json.dumps(ordered, indent=1))
    return path


def audits_section(results: str | Path) -> list[str]:
    """report.md's section of the audits recorded for the result file: per individual its
    table, warnings and notes; no lines where none was recorded."""
    audits = read_audits(results)
    if not audits:
        return []
    lines = [
        "## Deployment audit (asked and executed precision per layer)",
        "",
        "As export --check and evaluate-individual --backend last recorded it "
        f"(`{audits_path(results).name}`).",
        "",
    ]
    for individual, audit in audits.items():
        lines += [f"### Individual {individual}", "", audit_markdown(audit), ""]
    return lines
