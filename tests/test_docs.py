"""The documentation site builds with warnings as errors (`make test`): a broken link or
anchor between its pages, a page left out of the navigation, a docstring mkdocstrings cannot
read fail here. `make docs` builds the same site into site/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPOSITORY


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly (every warning an error) into a folder of its own."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    pytest.importorskip("mkdocstrings", reason="the docs extra is not installed")
    folder = tmp_path_factory.mktemp("site") / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def test_the_site_builds_strictly(site: Path) -> None:
    pages = {str(path.relative_to(site)) for path in site.rglob("*.html")}
    expected = {str(Path(page).with_suffix(".html")) for page in _nav_pages()}
    assert expected <= pages, expected - pages
    reference = (site / "reference.html").read_text()
    assert "model_explorer.api.search.search" in reference  # read from the docstrings
    assert "Args" in reference or "Parameters" in reference


# What a page would fetch: scripts, stylesheets, fonts, frames and images by http(s).
FETCHED = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"']https?://", re.I)


def test_no_page_loads_anything_from_the_network(site: Path) -> None:
    """Opened from the disk, every page works with what the site holds: no script, stylesheet,
    font or image from elsewhere (the theme's web fonts and its CDN shim are turned off)."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    fetching = [str(page.relative_to(site)) for page in pages if FETCHED.search(page.read_text())]
    assert not fetching, fetching


def _browser() -> str | None:
    import shutil

    return next(
        (
            found
            for name in ("chromium", "chromium-browser", "google-chrome")
            if (found := shutil.which(name))
        ),
        None,
    )


def test_the_site_searches_when_opened_from_the_disk(site: Path) -> None:
    """Headless Chromium opens index.html from file:// with a query (`?q=`): the search, whose
    index runs in a worker the browser would refuse to start from a file, lists results (the
    site's own worker shim, assets/javascripts/iframe-worker-shim.js)."""
    browser = _browser()
    if browser is None:
        pytest.skip("no Chromium to open the site with (Debian: apt install chromium)")
    url = (site / "index.html").as_uri() + "?q=hypervolume"
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=8000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"md-search-result__meta\">(\d+) matching documents?<", done.stdout)
    assert found is not None, done.stdout[-2000:] + done.stderr[-2000:]
    assert int(found.group(1)) >= 1


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


def _hook():  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location("keys_hook", REPOSITORY / "docs/_hooks/keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_key_reference_is_the_settings_model() -> None:
    """Every key the model validates is a row, with its default; nested sections expanded."""
    from model_explorer.exploration.spec import ExplorationDatasets, ExplorationSpec, NSGASpec

    table = _hook().key_table("exploration", "model_explorer.exploration.spec:ExplorationSpec")
    keys = [_plain(line.split("|")[1]) for line in table.splitlines()[2:]]
    sections = {"nsga": NSGASpec, "datasets": ExplorationDatasets}  # expanded, in place
    expected = []
    for name in ExplorationSpec.model_fields:
        inner = sections.get(name)
        expected += [f"exploration.{name}.{n}" for n in inner.model_fields] if inner else []
        expected += [] if inner else [f"exploration.{name}"]
    assert keys == expected
    row = next(r for r in table.splitlines()[2:] if _plain(r.split("|")[1]).endswith("pop_size"))
    assert _plain(row.split("|")[3]) == "15"
    assert NSGASpec.model_fields["pop_size"].description in row


def test_a_nested_section_shows_the_defaults_its_parent_gives_it() -> None:
    """`quantization.weight` is a per-channel quantizer and `input` an unsigned-auto one,
    where a bare QuantizerSpec is per tensor and signed: the table shows the parent's."""
    from model_explorer.quantization.spec import QuantizationSpec

    table = _hook().key_table("q", "model_explorer.quantization.spec:QuantizationSpec")
    cells = {
        _plain(line.split("|")[1]): _plain(line.split("|")[3]) for line in table.splitlines()[2:]
    }
    made = QuantizationSpec()
    assert cells["q.weight.axis"] == str(made.weight.axis) == "0"
    assert cells["q.input.unsigned"] == str(made.input.unsigned) == "auto"
    assert cells["q.input.axis"] == "none" and cells["q.include"] == '["*"]'


def _plain(cell: str) -> str:
    """A generated cell's text as the reader sees it: tags and line-break hints dropped."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


def test_a_key_without_a_description_fails_the_build() -> None:
    from model_explorer.schema.specs import Spec

    class Planted(Spec):
        described: int = 1
        """A key with its docstring."""
        undescribed: int = 2

    hook = _hook()
    import sys
    import types

    module = types.ModuleType("planted_settings")
    module.Planted = Planted
    sys.modules["planted_settings"] = module
    try:
        with pytest.raises(hook.MissingDescription, match="undescribed has no docstring"):
            hook.key_table("planted", "planted_settings:Planted")
    finally:
        sys.modules.pop("planted_settings")


def _reference_hook():  # noqa: ANN202
    import importlib.util

    path = REPOSITORY / "docs/_hooks/reference.py"
    spec = importlib.util.spec_from_file_location("reference_hook", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_public_name_without_a_docstring_fails_the_build() -> None:
    """A planted class of the reference: a method without a docstring fails, one whose
    docstring a base class of the package gives passes, and torch's `forward` text does not
    count as ours."""
    import sys
    import types

    from torch import nn

    class Base:
        def measure(self) -> None:
            """Measured."""

    class Planted(Base, nn.Module):
        """A planted class."""

        def measure(self) -> None:  # inherits its docstring from Base
            pass

        def forward(self, x):  # noqa: ANN001, ANN201 - torch's docstring only
            return x

        @property
        def size(self) -> int:
            return 1

    module = types.ModuleType("model_explorer_planted")
    Base.__module__ = Planted.__module__ = "model_explorer.planted"
    module.Planted = Planted
    sys.modules["model_explorer.planted"] = module
    try:
        hook = _reference_hook()
        assert hook.undocumented("model_explorer.planted.Planted") == [
            "model_explorer.planted.Planted.forward",
            "model_explorer.planted.Planted.size",
        ]
        page = types.SimpleNamespace(file=types.SimpleNamespace(src_path="reference.md"))
        with pytest.raises(hook.MissingDocstring, match="Planted.forward"):
            hook.on_page_markdown("::: model_explorer.planted.Planted\n", page, None, None)
        assert hook.undocumented("model_explorer.api.search.search") == []
    finally:
        sys.modules.pop("model_explorer.planted")


def test_a_typed_section_lists_every_entrys_options() -> None:
    """One group of rows per registered dataset type, holding exactly its options model's
    keys (or saying it takes none), then the other forms of names."""
    from model_explorer.datasets import DATASETS

    table = _hook().types_table("d", "model_explorer.datasets.base:DatasetSpec")
    groups: dict[str, list[str]] = {}
    current = ""
    for line in table.splitlines()[2:]:
        cells = line.split("|")
        current = _plain(cells[1]) or current
        groups.setdefault(current, []).append(_plain(cells[2]))
    for entry in DATASETS.entries():
        options = entry.options.model_fields if entry.options else {}
        assert groups[entry.name] == ([f"d.{name}" for name in options] or [""]), entry.name
    assert list(groups) == DATASETS.names() + DATASETS.forms()
    assert groups["package.module:builder"] == ["d.*"]  # any key, passed to the builder


def test_the_workload_table_links_each_section_to_its_own() -> None:
    from model_explorer.workload.file import Workload

    table = _hook().sections_table("workload", "model_explorer.workload.file:Workload")
    keys = [_plain(line.split("|")[1]) for line in table.splitlines()[2:]]
    assert keys == [f"workload.{name}" for name in Workload.model_fields]
    sections = "metric problem model quantization sparsity calibration energy_evaluation"
    sections += " exploration retraining reevaluation"
    assert sorted(re.findall(r"\(#the-(\w+)-keys\)", table)) == sorted(sections.split())


def test_the_key_reference_page_holds_the_tables_the_settings_give() -> None:
    """docs/workloads.md carries its tables (read as tables on the repository's web view too),
    and they are what docs/_hooks/keys.py makes from the settings models now: a key added,
    renamed or described anew and not regenerated fails here."""
    hook = _hook()
    text = hook.PAGE.read_text()
    assert text.count(hook.END) == len(hook.MARKER.findall(text)) >= 20
    assert hook.regenerated(text) == text, "run python docs/_hooks/keys.py"


def test_the_reference_contents_are_the_docstrings() -> None:
    """docs/reference.md's contents table (what the repository's web view shows, where the
    `:::` entries are bare lines) lists every entry of the page with its docstring's summary
    as it is now: a name added below, or a docstring changed, without the table fails here."""
    hook = _reference_hook()
    text = hook.PAGE.read_text()
    assert hook.page_with_contents(text) == text, "run python docs/_hooks/reference.py"
    rows = hook.contents(text).count("| `model_explorer.")
    assert rows == len(hook.DIRECTIVE.findall(text)) >= 40


def test_every_public_name_has_a_reference_entry() -> None:
    """Each name `import model_explorer` offers is an entry of docs/reference.md, under the
    path it is defined at: a name added to the package's face without one fails here."""
    import model_explorer

    hook = _reference_hook()
    entries = set(hook.DIRECTIVE.findall(hook.PAGE.read_text()))
    missing = []
    for name in set(model_explorer.__all__) - {"__version__"}:
        found = getattr(model_explorer, name)
        paths = {f"{found.__module__}.{found.__qualname__}", f"{found.__module__}.{name}"}
        if not paths & entries:  # an alias is entered by its own name
            missing.append(name)
    assert not missing, f"not in docs/reference.md: {missing}"
