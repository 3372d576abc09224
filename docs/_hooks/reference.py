"""A MkDocs hook: every name a page hands to mkdocstrings (`::: package.module.Name`) has a
docstring, and so has each public method and property of a class it names, its own or one
inherited from a class of this package (not torch's `forward` text). A name without one fails
the build, since mkdocstrings itself renders it silently empty."""

from __future__ import annotations

import inspect
import pkgutil
import re
from typing import Any

DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.MULTILINE)
PACKAGE = "model_explorer"


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
