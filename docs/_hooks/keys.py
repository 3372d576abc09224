"""The workload key reference generated from the settings models themselves, so that it cannot
drift from validation. A page writes

    <!-- keys workload.exploration: model_explorer.exploration.spec:ExplorationSpec -->

and gets a table of every key of that model (nested sections expanded, a section chosen by a
`type` shown as one key), with its type, its default and its description: the docstring under
the field (`use_attribute_docstrings`). A field without one fails the build. Two more markers:

    <!-- types workload.metric: model_explorer.metrics.functions:MetricSpec -->

the options each registered entry of a typed section takes beside its `type` (one table, a
group of rows per entry, the other forms of names last), and

    <!-- sections workload: model_explorer.workload.file:Workload -->

one row per key with its sections unexpanded, each linking to the page's heading "The `name:`
keys", which the build's anchor check then requires.

`python docs/_hooks/keys.py` writes each table under its marker, up to an end marker, into
docs/workloads.md itself, so the page reads as tables on the repository's web view too;
tests/test_docs.py fails when the page differs from what the settings give now."""

from __future__ import annotations

import html
import pathlib
import pkgutil
import re
import types
import typing
from typing import Any

MARKER = re.compile(
    r"<!-- (?P<kind>keys|types|sections) (?P<prefix>[\w.]+): (?P<model>[\w.]+:\w+) -->"
)


class MissingDescription(Exception):
    """A key of a settings model has no description."""


END = "<!-- end of the generated table -->"
GENERATED = re.compile(rf"(?P<marker>{MARKER.pattern})(?:\n.*?{re.escape(END)})?", re.DOTALL)
PAGE = pathlib.Path(__file__).resolve().parents[1] / "workloads.md"


def regenerated(markdown: str) -> str:
    """The page with each marker's table written under it (any table there before replaced)."""
    tables = {"keys": key_table, "types": types_table, "sections": sections_table}

    def table(found: re.Match[str]) -> str:
        made = tables[found["kind"]](found["prefix"], found["model"])
        return f"{found['marker']}\n\n{made}\n\n{END}"

    return GENERATED.sub(table, markdown)


HEADER = ["| key | type | default | meaning |", "|---|---|---|---|"]


def key_table(prefix: str, path: str) -> str:
    """The Markdown table of the model at `path` (`module:Class`), its keys under `prefix`."""
    return "\n".join(HEADER + _rows(prefix, pkgutil.resolve_name(path)))


def sections_table(prefix: str, path: str) -> str:
    """The model's keys with its sections as one row each, linking to their own tables."""
    return "\n".join(HEADER + _rows(prefix, pkgutil.resolve_name(path), expand=False))


def types_table(prefix: str, path: str) -> str:
    """The options of every entry of a typed section's registry, a group of rows per entry:
    what a workload may write beside `type: <entry>`."""
    model = pkgutil.resolve_name(path)
    registry, type_key = model.registry, model.type_key
    rows = [f"| `{type_key}` | key | type | default | meaning |", "|---|---|---|---|---|"]
    entries = [(entry.name, entry.options) for entry in registry.entries()]
    entries += [(form, registry.import_options) for form in registry.forms()]
    for name, options in entries:
        shown = code(name)
        fields = [] if options is None else _rows(prefix, options)
        if options is not None and options.model_config.get("extra") == "allow":
            fields.append(f"| {code(prefix + '.*')} | any | | every other key, passed on by name |")
        if not fields:
            fields = ["| | | | takes no options |"]
        rows += [f"| {shown if i == 0 else ''} {row}" for i, row in enumerate(fields)]
    return "\n".join(rows)


def _rows(prefix: str, model: Any, given: Any = None, expand: bool = True) -> list[str]:
    """The rows of `model`'s keys; `given`: the instance a parent section's default makes of
    it (`quantization.weight` is per channel where a bare quantizer is per tensor), whose
    values are the defaults shown."""
    from pydantic_core import PydanticUndefined

    from model_explorer.schema.specs import Spec, TypedSpec

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
        if section is not None and not issubclass(section, TypedSpec) and expand:
            rows += _rows(key, section, value if isinstance(value, section) else None)
            continue
        if value is PydanticUndefined:
            default = "required"
        elif value is None:
            default = "none"
        elif isinstance(value, (list, dict)) and not value:
            default = "empty"
        elif isinstance(value, TypedSpec):
            default = code(getattr(value, value.type_key))
        elif isinstance(value, Spec):
            default = "its defaults"
        else:
            default = code(_yaml(value))
        text = _escaped(" ".join(field.description.split()))
        if section is not None and not expand:
            text += f" [Its keys](#the-{name}-keys)."
        rows.append(f"| {code(key)} | {type_name(field.annotation)} | {default} | {text} |")
    return rows


def code(text: Any) -> str:
    """`text` as inline code that a narrow column breaks only after a dot, an underscore or a
    comma (`problem.bit_<wbr>weighting_<wbr>function`), never inside a word."""
    escaped = html.escape(str(text)).replace("|", "&#124;")
    return "<code>" + re.sub(r"([._,])", r"\1<wbr>", escaped) + "</code>"


def _escaped(text: str) -> str:
    """`<` and `>` outside code spans as entities (a table cell is HTML to Markdown), and `|`
    escaped everywhere."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):
        parts[index] = parts[index].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")  # a pipe ends a table cell, code or not


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
        return " / ".join(code(a) for a in args)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (list, tuple, set):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type):
        from model_explorer.schema.specs import Spec

        if issubclass(annotation, Spec):
            return "section"
        return {"str": "text", "float": "number", "int": "integer", "bool": "true/false"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation).replace("typing.", "")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(PAGE.parents[1]))
    PAGE.write_text(regenerated(PAGE.read_text()))
    print(f"wrote {PAGE}")
