"""A name -> builder registry with a decorator, used for models, datasets, metrics and more."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from model_explorer.errors import UserError, did_you_mean

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered builder and the pydantic model of the options it accepts (if any)."""

    name: str
    builder: T
    options: Any = None


class Registry(Generic[T]):
    """Maps names to builders; an unknown name lists the known ones and suggests the closest."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._namespaces: dict[str, Entry[Callable[..., Any]]] = {}

    def register(self, name: str, *, options: Any = None) -> Callable[[T], T]:
        """Decorator registering `builder` under `name` (and its options model)."""

        def decorator(builder: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._entries[name] = Entry(name, builder, options)
            return builder

        return decorator

    def register_namespace(self, prefix: str, *, options: Any = None) -> Callable[[T], T]:
        """Decorator for a builder of every name `prefix:<item>`; it receives `<item>` first."""

        def decorator(builder: T) -> T:
            self._namespaces[prefix] = Entry(prefix, builder, options)  # type: ignore[arg-type]
            return builder

        return decorator

    def names(self, pattern: str | None = None) -> list[str]:
        """Registered names, sorted, optionally filtered by a shell-style pattern."""
        names = sorted(self._entries)
        return [n for n in names if pattern is None or fnmatch.fnmatch(n, pattern)]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def namespace(self, name: str) -> tuple[Entry[Any], str] | None:
        """The namespace entry and item for `prefix:item` names, else None."""
        prefix, sep, item = name.partition(":")
        if sep and prefix in self._namespaces:
            return self._namespaces[prefix], item
        return None

    def get(self, name: str, where: str | None = None) -> Entry[T]:
        """The entry for `name`; `where` names the workload key for the error message."""
        try:
            return self._entries[name]
        except KeyError:
            prefix = f"{where}: " if where else ""
            known = ", ".join(self.names())
            raise UserError(
                f"{prefix}unknown {self.kind} '{name}'{did_you_mean(name, self._entries)}; "
                f"known: {known}"
            ) from None
