"""matplotlib set up once for every figure the project draws: headless unless a display is
set up, and figures written atomically as PNG or PDF."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from model_explorer.fileio import atomic_path


def pyplot() -> Any:
    """matplotlib.pyplot, imported on first use, with the Agg backend when no display is set up
    (commands run on servers and in CI), unless a backend was chosen by name: Jupyter's inline
    backend (`module://matplotlib_inline...`, set by the kernel) draws without a display, and
    a notebook on a remote JupyterLab must keep it to show its figures."""
    import matplotlib

    backend = matplotlib.get_backend().lower()
    drawn = backend in ("agg", "pdf") or backend.startswith("module://")
    if not os.environ.get("DISPLAY") and not drawn:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(
    figure: Any, path: str | os.PathLike[str], dpi: int = 150, close: bool = False
) -> Path:
    """Write `figure` to `path` (format from its suffix, PNG by default) atomically; `close`
    releases it afterwards."""
    path = Path(path)
    try:
        with atomic_path(path) as temporary:
            figure.savefig(
                temporary, format=path.suffix.lstrip(".") or "png", dpi=dpi, bbox_inches="tight"
            )
    finally:
        if close:
            pyplot().close(figure)
    return path
