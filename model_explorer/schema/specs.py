"""The workload schema's building blocks: strict specs, registry-typed specs, checked value
types, path resolution and the errors of a file that does not validate, one line per problem.

This module imports no registry of its own: a `TypedSpec` subclass names the Registry object whose
entries its `type` may take, and each section's settings live beside the code that uses them.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from model_explorer.errors import did_you_mean
from model_explorer.schema.paths import resolve_path
from model_explorer.schema.registry import Registry


def _positive(value: float) -> float:
    if value <= 0:
        kind = "integer" if isinstance(value, int) else "number"
        raise PydanticCustomError("not_positive", f"must be a positive {kind}")
    return value


def _non_negative(value: float) -> float:
    if value < 0:
        raise PydanticCustomError("negative", "must not be negative")
    return value


def _fraction(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise PydanticCustomError("not_fraction", "must be a fraction between 0 and 1")
    return value


def _bits(value: int) -> int:
    if not 2 <= value <= 16:
        raise PydanticCustomError("bits_range", "must be between 2 and 16 bits")
    return value


def _percentile(value: float) -> float:
    if not 0 < value <= 100:
        raise PydanticCustomError("percentile", "must be a percentage above 0 and at most 100")
    return value


Bits = Annotated[int, AfterValidator(_bits)]
PositiveInt = Annotated[int, AfterValidator(_positive)]
PositiveFloat = Annotated[float, AfterValidator(_positive)]
NonNegativeInt = Annotated[int, AfterValidator(_non_negative)]
NonNegativeFloat = Annotated[float, AfterValidator(_non_negative)]
Fraction = Annotated[float, AfterValidator(_fraction)]
Percentage = Annotated[float, AfterValidator(_percentile)]


class Spec(BaseModel):
    """A strict section of the workload: unknown keys are an error with a suggestion."""

    # NaN and infinity are refused in every float setting: no setting means either. A field's
    # docstring (the string below it) is its description, which the documentation's key
    # reference shows (docs/hooks/keys.py).
    model_config = ConfigDict(
        extra="forbid", frozen=False, allow_inf_nan=False, use_attribute_docstrings=True
    )

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.model_config.get("extra") != "allow":
            return _mark_unknown(data, set(cls.model_fields))
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_rejected_values(cls, value: Any) -> Any:
        return _refuse_rejected(value)

    @model_validator(mode="after")
    def _take_the_root(self, info: ValidationInfo) -> Any:
        self._root = (info.context or {}).get("root")
        return self

    _root: Path | None = PrivateAttr(default=None)

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """A path this section names, taken from the workload's root (the working directory
        for a section built outside a workload file)."""
        return resolve_path(path, self._root)


class Rejected:
    """Stands in for the value of a key that is wrong in a way found before pydantic's own
    checks (a key the spec does not take, a bad option of a typed spec, a missing file),
    carrying what to say about it: pydantic then reports the key at its place in the file and
    goes on validating the rest, so that one run lists every problem. `subpath` continues the
    key path below the key (an option's list element)."""

    def __init__(self, text: str, subpath: tuple[Any, ...] = ()) -> None:
        self.text = text
        self.subpath = subpath

    def __repr__(self) -> str:
        return "<rejected key>"


def _unknown_text(key: str, known: set[str]) -> str:
    return f"unknown key{did_you_mean(key, known)}; known keys: {', '.join(sorted(known))}"


def _mark_unknown(data: dict[str, Any], known: set[str]) -> dict[str, Any]:
    if all(key in known for key in data):
        return data
    return {
        key: value if key in known else Rejected(_unknown_text(str(key), known))
        for key, value in data.items()
    }


def _refuse_rejected(value: Any) -> Any:
    if isinstance(value, Rejected):
        raise PydanticCustomError("rejected_key", "{text}", {"text": value.text})
    return value


class TypedSpec(Spec):
    """A spec whose `type` names an entry of `registry`; the entry's own options sit beside
    `type` and its `options` model validates them: each kind declares its own keys, with no
    dispatcher here. A key that only another entry takes is named as such. A subclass may name
    the entry under another key (`type_key`), declaring that field itself."""

    model_config = ConfigDict(extra="allow")
    registry: ClassVar[Registry[Any]]
    type_key: ClassVar[str] = "type"
    _options: Any = PrivateAttr(default=None)
    # The extra keys' validator, as an evaluated annotation rather than a string: pydantic
    # before 2.13 resolves this one string in each subclass's module, where `Annotated` may be
    # unknown.
    __annotations__["__pydantic_extra__"] = dict[
        str, Annotated[Any, AfterValidator(_refuse_rejected)]
    ]

    @classmethod
    def _entry_name(cls, data: dict[str, Any]) -> Any:
        if cls.type_key in data:
            return data[cls.type_key]
        field = cls.model_fields.get(cls.type_key)
        return None if field is None or field.is_required() else field.default

    @model_validator(mode="before")
    @classmethod
    def _shorthand_and_keys(cls, data: Any, info: ValidationInfo) -> Any:
        shorthand = isinstance(data, str)  # `metric: top1`: the name alone
        if shorthand:
            data = {cls.type_key: data}
        if isinstance(data, dict) and isinstance(name := cls._entry_name(data), str):
            registry = cls.registry
            entry = registry.lookup(name)
            if entry is None:
                known = registry.names()
                hint = cls._unknown_hint(name) or did_you_mean(name, known)
                said = (
                    f"must be one of {', '.join(known + registry.forms())}, got unknown "
                    f"{registry.kind} type '{name}'{hint}"
                )
                closest = difflib.get_close_matches(name, known, n=1)
                if not closest:
                    raise PydanticCustomError(
                        "unknown_type", "{text}", {"text": said, "key": cls.type_key}
                    )
                # the keys beside it checked against the entry it was most likely meant to
                # name, so that one run lists their problems too
                entry = registry.lookup(closest[0])
                below = (cls.type_key,) if shorthand else ()  # named as the key it stands for
                data = {**data, cls.type_key: Rejected(said, below)}
            own = set(cls.model_fields) | _option_keys(entry)
            if _takes_any_key(entry):
                own |= set(data)
            if any(key not in own for key in data):
                data = {
                    key: value if key in own else _foreign_key(cls, registry, str(key), own)
                    for key, value in data.items()
                }
            data = _mark_option_problems(entry.options, data, info.context)
            data = cls._check_entry(entry, data, info.context)
        return data

    @classmethod
    def _unknown_hint(cls, name: str) -> str:
        """What a subclass knows of a name its registry lacks (appended to the error)."""
        return ""

    @classmethod
    def _check_entry(cls, entry: Any, data: dict[str, Any], context: Any) -> dict[str, Any]:
        """A subclass's checks that need the entry (before pydantic's own, so that their
        problems are listed with every other): returns `data` with `Rejected` values."""
        return data

    @model_validator(mode="after")
    def _validate_options(self, info: ValidationInfo) -> TypedSpec:
        entry = self.registry.lookup(getattr(self, self.type_key))
        options = entry.options if entry is not None else None
        extra = dict(self.model_extra or {})
        self._options = options.model_validate(extra, context=info.context) if options else None
        return self

    @property
    def options(self) -> Any:
        """The validated, entry-specific options (a pydantic model), or None."""
        return self._options

    @classmethod
    def without_other_options(cls, data: dict[str, Any]) -> dict[str, Any]:
        """`data` (a section as written) without the keys that only other entries than the one
        it names take: what a changed `type` leaves behind. Keys no entry takes stay, to be
        refused as unknown."""
        name = cls._entry_name(data)
        entry = cls.registry.lookup(name) if isinstance(name, str) else None
        if entry is None:
            return data
        own = set(cls.model_fields) | _option_keys(entry)
        others = {key for other in cls.registry.entries() for key in _option_keys(other)}
        return {key: value for key, value in data.items() if key in own or key not in others}

    @model_serializer(mode="wrap")
    def _with_option_defaults(self, handler: Any, info: Any) -> Any:
        """As written; with the context `{"defaults": True}`, every option of the entry with its
        default filled in (what `validate --show` prints)."""
        data = handler(self)
        if (info.context or {}).get("defaults") and self._options is not None:
            data = {**data, **self._options.model_dump(mode=info.mode, exclude_none=True)}
        return data


def _takes_any_key(entry: Any) -> bool:
    """Whether the entry's options take keys they do not declare (user code's arguments)."""
    return entry.options is not None and entry.options.model_config.get("extra") == "allow"


def _option_keys(entry: Any) -> set[str]:
    return set(entry.options.model_fields) if entry.options is not None else set()


def _mark_option_problems(options: Any, data: dict[str, Any], context: Any) -> dict[str, Any]:
    """Check the entry's options now, marking each bad one, so that their problems are listed
    together with those of the keys beside them. Problems of the options as a whole are left
    to `_validate_options`."""
    if options is None:
        return data
    given = {key: value for key, value in data.items() if key in options.model_fields}
    try:
        options.model_validate(given, context=context)
    except ValidationError as error:
        marked = dict(data)
        for path, text in _problems(error, given):
            if path:
                marked[path[0]] = Rejected(text, tuple(path[1:]))
        return marked
    return data


def _foreign_key(
    cls: type[TypedSpec], registry: Registry[Any], key: str, own: set[str]
) -> Rejected:
    """A key this entry does not take: say which entries do, else suggest the closest key."""
    takers = [entry.name for entry in registry.entries() if key in _option_keys(entry)]
    if not takers:
        return Rejected(_unknown_text(key, own))
    kind = registry.kind + ("s" if len(takers) > 1 else "")
    verb = "take" if len(takers) > 1 else "takes"
    names = " and ".join([", ".join(takers[:-1]), takers[-1]] if len(takers) > 1 else takers)
    return Rejected(
        f"only the {names} {kind} {verb} '{key}'; set '{cls.type_key}: "
        f"{takers[0]}' or remove '{key}'"
    )


_MESSAGES = {
    "missing": "is required",
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a mapping of keys to values",
    "model_type": "must be a mapping of keys to values",
    "model_attributes_type": "must be a mapping of keys to values",
    "literal_error": "must be one of {expected}",
    "too_short": "needs {min_length} values",
    "too_long": "needs {max_length} values",
}


def validation_problems(error: ValidationError, data: Any) -> list[tuple[str, str]]:
    """Every problem pydantic found, once per key: the key path as it is written in the file
    (`workload.a.b`) and what is wrong, in the order of the file."""
    return [
        (".".join(["workload", *map(str, path)]), text) for path, text in _problems(error, data)
    ]


def _problems(error: ValidationError, data: Any) -> list[tuple[list[Any], str]]:
    problems: dict[tuple[Any, ...], str] = {}
    for item in _fitting_errors(error, data):
        path, _ = _key_path(item["loc"], data)
        ctx = item.get("ctx") or {}
        value = item["input"]
        if "key" in ctx:
            path = path + [ctx["key"]]
        if isinstance(value, Rejected):
            path = path + list(value.subpath)
            text = value.text
        elif item["type"] == "missing" and path and isinstance(path[-1], int):
            path = path[:-1]  # a fixed-length list with too few entries
            text = f"has too few values, got {value!r}"
        else:
            template = _MESSAGES.get(item["type"])
            text = template.format(**ctx) if template else item["msg"]
            if text.startswith("Value error, "):
                text = text[len("Value error, ") :]
            # Messages that quote the value themselves carry it in their context.
            quoted = "name" in ctx or "path" in ctx
            if item["type"] != "missing" and not quoted and not isinstance(value, dict):
                text += f", got {value!r}"
        problems.setdefault(tuple(path), text)
    return [(list(path), text) for path, text in problems.items()]


def _fitting_errors(error: ValidationError, data: Any) -> list[Any]:
    """Of the members of a union (a number or a list of numbers), keep the errors of the member
    whose kind matches what the file holds; pydantic reports every member."""
    items = error.errors(include_url=False)
    fitting = []
    for item in items:
        _, union = _key_path(item["loc"], data)
        if union is None:
            fitting.append(item)
            continue
        tag, node = union
        if ("list[" in tag) == isinstance(node, list):
            fitting.append(item)
    return fitting or items


def _key_path(loc: tuple[Any, ...], data: Any) -> tuple[list[Any], tuple[str, Any] | None]:
    """Split pydantic's loc into the keys present in the file and the first union-member tag
    (with the file's value at that point)."""
    path: list[Any] = []
    union: tuple[str, Any] | None = None
    node = data
    for position, part in enumerate(loc):
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, (list, tuple)) and isinstance(part, int):
            path.append(part)
            node = node[part] if part < len(node) else None
        elif isinstance(node, dict) and position == len(loc) - 1:
            path.append(part)  # a required key that the file leaves out
            node = None
        elif union is None:
            union = (str(part), node)  # the member of a union that pydantic tried
    return path, union
