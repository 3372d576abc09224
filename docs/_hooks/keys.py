"""A MkDocs hook: the workload key reference generated from the settings models themselves, so
that it cannot drift from validation. A page writes

    <!-- keys workload.exploration: model_explorer.exploration.spec:ExplorationSpec -->

and gets a table of every key of that model (nested sections expanded, a section chosen by a
`type` shown as one key), with its type, its default and its description: the docstring under
the field (`use_attribute_docstrings`). A field without one fails the build."""

from __future__ import annotations

import importlib
import re
import types
import typing
from typing import Any

MARKER = re.compile(r"<!-- keys (?P<prefix>[\w.]+): (?P<model>[\w.]+:\w+) -->")


class MissingDescription(Exception):
    """A key of a settings model has no description."""


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return MARKER.sub(lambda found: key_table(found["prefix"], found["model"]), markdown)


def key_table(prefix: str, path: str) -> str:
    """The Markdown table of the model at `path` (`module:Class`), its keys under `prefix`."""
    module, _, name = path.partition(":")
    model = getattr(importlib.import_module(module), name)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    rows += _rows(prefix, model)
    return "\n".join(rows)


def _rows(prefix: str, model: Any, given: Any = None) -> list[str]:
    """The rows of `model`'s keys; `given`: the instance a parent section's default makes of
    it (`quantization.weight` is per channel where a bare quantizer is per tensor), whose
    values are the defaults shown."""
    from pydantic_core import PydanticUndefined

    from model_explorer.schema import Spec, TypedSpec

    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}.{name}"
        if not field.description:
            raise MissingDescription(f"{model.__module__}.{model.__name__}.{name} has no docstring")
        value = PydanticUndefined
        if given is not None:
            value = getattr(given, name)
        elif field.default_factory is not None:
            value = field.default_factory()
        elif field.default is not PydanticUndefined:
            value = field.default
        section = _section(field.annotation, Spec)
        if section is not None and not issubclass(section, TypedSpec):
            rows += _rows(key, section, value if isinstance(value, section) else None)
            continue
        if value is PydanticUndefined:
            default = "required"
        elif value is None:
            default = "none"
        elif isinstance(value, (list, dict)) and not value:
            default = "empty"
        elif isinstance(value, Spec):
            default = "its defaults"
        else:
            default = f"`{_yaml(value)}`"
        text = _escaped(" ".join(field.description.split()))
        rows.append(f"| `{key}` | {type_name(field.annotation)} | {default} | {text} |")
    return rows


def _escaped(text: str) -> str:
    """`<` and `>` outside code spans as entities (a table cell is HTML to Markdown)."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _yaml(value: Any) -> str:
    """A default as the workload file writes it (`true`, not Python's `True`; lists in
    brackets)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(f'"{i}"' if isinstance(i, str) else _yaml(i) for i in value) + "]"
    return str(value)


def _section(annotation: Any, spec: type) -> type | None:
    """The settings model a field holds (alone or beside None), else None."""
    options = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
    found = [a for a in options if isinstance(a, type) and issubclass(a, spec)]
    return found[0] if found else None


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def type_name(annotation: Any) -> str:
    """A type as a reader of a YAML file needs it: `int or null`, `auto / random`."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if _is_union(annotation):
        return " or ".join(type_name(a) for a in args)
    if origin is typing.Literal:
        return " / ".join(f"`{a}`" for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (list, tuple, set):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type):
        from model_explorer.schema import Spec

        if issubclass(annotation, Spec):
            return "section"
        return {"str": "text", "float": "number", "int": "integer", "bool": "true/false"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation).replace("typing.", "")
