"""The scripts beside the package (scripts/, evaluation_scripts/, benchmarks/) import against the
package as it is: a moved name breaks this test, not a user's run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import REPOSITORY

SCRIPTS = sorted(
    path
    for folder in ("scripts", "evaluation_scripts", "benchmarks")
    for path in (REPOSITORY / folder).glob("*.py")
)


@pytest.mark.parametrize("path", SCRIPTS, ids=[str(p.relative_to(REPOSITORY)) for p in SCRIPTS])
def test_a_script_imports(path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(path.parent))  # benchmarks import their shared helpers
    name = f"script_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)  # runs its imports, not its main: __name__ is not __main__
    source = path.read_text()
    # prepared.py and the peers (peer_*.py) are the benchmarks' helpers, not scripts.
    assert "__main__" in source or path.stem == "prepared" or path.stem.startswith("peer_")
