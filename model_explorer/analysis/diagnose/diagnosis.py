"""`diagnose`: run the inspectors, print and log the findings, write the recommended workload."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from model_explorer.analysis.diagnose.base import DiagnosisContext, Finding, run_inspectors
from model_explorer.analysis.diagnose.recommendations import (
    apply_recommendations,
    merged_recommendations,
)
from model_explorer.errors import UserError, WorkloadError
from model_explorer.fileio import atomic_path
from model_explorer.problems.options import explored_bits
from model_explorer.schema.paths import workload_root
from model_explorer.schema.yamlfile import read_yaml
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload


def default_out_dir(workload: Workload) -> Path:
    return workload.results_folder / f"{workload.name}_diagnosis"


def diagnose(
    workload: Workload,
    order: Sequence[str],
    out_dir: Path,
    log_path: Path | None = None,
    output_workload: Path | None = None,
    interactive: bool = False,
    ask: Callable[[str], str] = input,
    echo: Callable[[str], None] = print,
    max_batches: int = 4,
    debug: bool = True,
) -> list[Finding]:
    """Run the inspectors in `order` and echo each finding; write `log_path` (the lines, then
    every finding as JSON), with `debug` the inspectors' debug log beside it
    (`.debug.<log name>`, as Hailo's tool), and with `output_workload` a copy of the workload
    file with the recommendations applied (interactively: those the user accepts)."""
    if output_workload is not None and workload.source is None:
        raise UserError("--output-workload: the workload was not read from a file")
    context = DiagnosisContext(
        WorkloadContext(workload),
        out_dir,
        max_batches=max_batches,
        interactive=interactive,
        ask=ask,
    )
    lines: list[str] = []

    def report(found: Finding) -> None:
        lines.append(found.line())
        echo(found.line())

    findings: list[Finding] = []
    log_path = log_path or out_dir / "diagnostic.log"
    try:
        with debug_log(log_path.with_name(f".debug.{log_path.name}") if debug else None):
            findings = run_inspectors(context, order, report)
    finally:  # findings so far reach the log also when an inspector fails
        _write_log(log_path, lines, findings)
    counts = Counter(f.severity for f in findings)
    echo(
        f"{counts['error']} errors, {counts['warning']} warnings, {counts['info']} info; "
        f"log in {log_path}"
    )
    if output_workload is not None:
        accepted = [f for f in findings if f.recommendation]
        if interactive:
            accepted = [f for f in accepted if _accept(f, ask)]
        written = write_recommended_workload(workload, accepted, output_workload)
        echo(f"wrote {output_workload} with {written} recommendations applied")
    return findings


def _accept(found: Finding, ask: Callable[[str], str]) -> bool:
    answer = ask(f"{found.line()}\n  apply {json.dumps(found.recommendation)}? [Y/n] ")
    return not answer.strip().lower().startswith("n")


def _write_log(path: Path, lines: list[str], findings: list[Finding]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary:
        temporary.write_text(
            "\n".join(lines)
            + "\n\n# findings as JSON\n"
            + json.dumps([f.to_dict() for f in findings], indent=2, default=float)
            + "\n"
        )


def keep_the_root(data: dict[str, Any], workload: Workload, path: Path) -> dict[str, Any]:
    """The workload's data as a file at `path` writes it: with a `root:` that keeps its relative
    paths naming the same files, where the new place would start them elsewhere."""
    root = workload.resolve(".").absolute()
    if workload_root(path.absolute()) == root:
        return data
    body = {**data["workload"], "root": os.path.relpath(root, path.absolute().parent)}
    return {**data, "workload": body}


class _Onwards(logging.Handler):
    """Passes a record on to the handlers above `logger` (the console), from `level` up."""

    def __init__(self, logger: logging.Logger, level: int) -> None:
        super().__init__(level)
        self.above = logger.parent

    def emit(self, record: logging.LogRecord) -> None:
        if self.above is not None:
            self.above.handle(record)


@contextlib.contextmanager
def debug_log(path: Path | None) -> Iterator[None]:
    """Within the block, every record of the diagnose loggers down to DEBUG also goes to
    `path` (nothing with None); the console keeps the level it had."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger("model_explorer.analysis.diagnose")
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    saved = logger.level, logger.propagate, logger.getEffectiveLevel()
    onwards = _Onwards(logger, saved[2])
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(handler)
    logger.addHandler(onwards)
    try:
        yield
    finally:
        for added in (handler, onwards):
            logger.removeHandler(added)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        handler.close()


def write_recommended_workload(workload: Workload, findings: Sequence[Finding], path: Path) -> int:
    """Write the workload file with the findings' recommendations merged in; validated before
    it is written. Returns how many findings contributed."""
    source = workload.source
    data: Any = read_yaml(source)  # the project's one YAML reader (already validated)
    override = merged_recommendations(findings)
    bit_range = explored_bits(workload.problem.options) if workload.exploration else None
    updated = keep_the_root(apply_recommendations(data, override, bit_range), workload, path)
    try:
        Workload.from_dict(updated, source=path, check_paths=False)
    except WorkloadError as error:  # a recommendation the schema rejects is our bug
        raise RuntimeError(f"the recommended workload does not validate: {error}") from error
    path.parent.mkdir(parents=True, exist_ok=True)
    contributing = sum(1 for f in findings if f.recommendation)
    header = (
        f"# {source.name} with the recommendations of `model-explorer diagnose` applied "
        f"({contributing} findings):\n# {json.dumps(override)}\n"
    )
    with atomic_path(path) as temporary:
        temporary.write_text(header + yaml.safe_dump(updated, sort_keys=False))
    return contributing
