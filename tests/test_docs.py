"""The documentation site builds with warnings as errors (`make test`): a broken link or
anchor between its pages, a page left out of the navigation, a docstring mkdocstrings cannot
read fail here. `make docs` builds the same site into site/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPOSITORY


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    pages = {path.name for path in site.glob("*.html")}
    expected = {Path(page).with_suffix(".html").name for page in _nav_pages()}
    assert expected <= pages, expected - pages
    reference = (site / "reference.html").read_text()
    assert "model_explorer.library.search.search" in reference  # read from the docstrings
    assert "Args" in reference or "Parameters" in reference


def test_the_readme_stays_a_first_minute() -> None:
    readme = (REPOSITORY / "README.md").read_text()
    assert readme.count("\n") < 250
    for link in ("docs/getting-started.md", "docs/own-model.md", "docs/reference.md"):
        assert f"]({link}" in readme and (REPOSITORY / link).is_file()


def _nav_pages() -> list[str]:
    import yaml

    text = (REPOSITORY / "mkdocs.yml").read_text()
    nav = yaml.safe_load(text)["nav"]
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, str):
            found.append(node)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(nav)
    return found
