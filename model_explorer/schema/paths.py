"""Paths a workload names: expanded (`~`, `$VARS`) and taken from the workload's root, the one
rule for relative paths (see `workload_root`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


def resolve_path(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Expand `~` and `$VARS`; a relative path is taken from `root` (a workload's root, see
    `workload_root`), or from the working directory without one."""
    expanded = Path(os.path.expandvars(os.path.expanduser(str(path))))
    if root is None or expanded.is_absolute():
        return expanded
    return Path(os.path.normpath(Path(root) / expanded))


def workload_root(source: str | os.PathLike[str], written: str | None = None) -> Path:
    """The folder a workload file's relative paths start from: its `root:` (itself relative
    to the file) where it has one; else the file's folder, or that folder's parent when it is
    named `workloads` (a project's workloads/ beside its results/ and data, the layout of the
    original tool and of this project)."""
    folder = Path(source).parent
    if written is not None:
        return resolve_path(written, folder)
    if folder.name == "workloads":
        return Path(os.path.normpath(folder.parent))
    return Path(os.path.normpath(folder))


def missing_path_text(value: str, context: dict[str, Any] | None, what: str) -> str | None:
    """What is wrong with a path that does not exist (None when it exists, or when validation
    runs with `check_paths=False`)."""
    if not (context or {}).get("check_paths", True):
        return None
    resolved = resolve_path(value, (context or {}).get("root"))
    if resolved.exists():
        return None
    unset = [var for var in _env_vars(value) if var not in os.environ]
    hint = f" (environment variable {', '.join(unset)} is not set)" if unset else ""
    root = (context or {}).get("root")
    expanded = Path(os.path.expandvars(os.path.expanduser(value)))
    if root is not None and not expanded.is_absolute():
        hint += (
            f" (relative paths start from the workload's root, {root}; `root:` in the file "
            "moves it)"
        )
    return f"{what} '{resolved}' does not exist{hint}; point it at the local copy"


def _env_vars(text: str) -> list[str]:
    return [a or b for a, b in re.findall(r"\$\{(\w+)\}|\$(\w+)", text)]
