"""A MkDocs hook: every name a page hands to mkdocstrings (`::: package.module.Name`) has a
docstring, and so has each public method and property of a class it names, its own or one
inherited from a class of this package (not torch's `forward` text). A name without one fails
the build, since mkdocstrings itself renders it silently empty.

`python docs/_hooks/reference.py` writes the page's contents table (each name with the first
paragraph of its docstring, by section) between two markers of docs/reference.md, so that the
page reads on the repository's web view too, where the `:::` lines are not rendered;
tests/test_docs.py fails when the table differs from the docstrings."""

from __future__ import annotations

import inspect
import pathlib
import pkgutil
import re
from typing import Any

DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.MULTILINE)
PACKAGE = "model_explorer"


PAGE = pathlib.Path(__file__).resolve().parents[1] / "reference.md"
BEGIN = "<!-- contents generated from the docstrings: python docs/_hooks/reference.py -->"
END = "<!-- end of the contents -->"
SECTION = re.compile(r"^## (.+)$", re.MULTILINE)


class MissingDocstring(Exception):
    """A public name of the API reference has no docstring."""


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    missing = [name for path in DIRECTIVE.findall(markdown) for name in undocumented(path)]
    if missing:
        raise MissingDocstring(f"{page.file.src_path}: no docstring: {', '.join(missing)}")
    return markdown


def undocumented(path: str) -> list[str]:
    """The dotted names under `path` that the reference would show without a docstring."""
    found = pkgutil.resolve_name(path)
    missing = [] if inspect.getdoc(found) else [path]
    if inspect.isclass(found):
        for name, member in vars(found).items():
            if not name.startswith("_") and _shown(member) and not _documented(found, name):
                missing.append(f"{path}.{name}")
    return missing


def _shown(member: Any) -> bool:
    return isinstance(member, (property, classmethod, staticmethod)) or inspect.isfunction(member)


def _text(member: Any) -> str | None:
    if isinstance(member, property):
        member = member.fget
    if isinstance(member, (classmethod, staticmethod)):
        member = member.__func__
    return (getattr(member, "__doc__", None) or "").strip() or None


def _documented(cls: type, name: str) -> bool:
    """Its own docstring, or the first one up the classes of this package that define it."""
    for owner in cls.__mro__:
        if name in vars(owner) and owner.__module__.split(".")[0] == PACKAGE:
            if _text(vars(owner)[name]):
                return True
    return False


def summary(path: str) -> str:
    """The first paragraph of the docstring of `path`, on one line, for a table cell."""
    text = inspect.getdoc(pkgutil.resolve_name(path)) or ""
    return " ".join(text.split("\n\n")[0].split()).replace("|", "\\|")


def contents(markdown: str) -> str:
    """The table of every `:::` name of the page below the markers, under its section."""
    body = markdown[markdown.index(END) :]
    lines = [BEGIN, "", "| name | what it is |", "|---|---|"]
    for part in re.split(r"^(?=## )", body, flags=re.MULTILINE):
        heading = SECTION.search(part)
        names = DIRECTIVE.findall(part)
        if heading and names:
            lines.append(f"| **{heading[1]}** | |")
            lines += [f"| `{name}` | {summary(name)} |" for name in names]
    return "\n".join([*lines, "", END])


def page_with_contents(markdown: str) -> str:
    start, end = markdown.index(BEGIN), markdown.index(END) + len(END)
    return markdown[:start] + contents(markdown) + markdown[end:]


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(PAGE.parents[1]))
    PAGE.write_text(page_with_contents(PAGE.read_text()))
    print(f"wrote {PAGE}")
