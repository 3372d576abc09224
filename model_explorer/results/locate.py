"""Where a notebook or a script finds the project's result files, wherever it was started: a
Jupyter kernel starts in the notebook's folder (evaluation_scripts/), `make run` writes to
results/ of the project."""

from __future__ import annotations

import os
from pathlib import Path


def latest_result(pattern: str = "expl_*.pkl", start: str | os.PathLike[str] | None = None) -> Path:
    """$RESULTS_FILE when set; else the newest file matching `pattern` in the `results/`
    folder of `start` (default: the working folder) or of the nearest folder above it that has
    a `results/` folder. FileNotFoundError says where it looked and what to do."""
    if os.environ.get("RESULTS_FILE"):
        chosen = Path(os.environ["RESULTS_FILE"])
        if not chosen.is_file():
            raise FileNotFoundError(f"RESULTS_FILE: '{chosen}' is not a file")
        return chosen
    here = Path(start if start is not None else Path.cwd()).resolve()
    looked = []
    for folder in (here, *here.parents):
        results = folder / "results"
        if results.is_dir():
            found = sorted(results.glob(pattern), key=lambda path: path.stat().st_mtime)
            if found:
                return found[-1]
            looked.append(str(results))
    where = ", ".join(looked) or f"no results/ folder in {here} or above it"
    raise FileNotFoundError(
        f"no {pattern} in {where}: run `make run` in the project (or model-explorer explore), "
        "or set RESULTS_FILE to a result file"
    )
