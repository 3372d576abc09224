"""A name -> builder registry with a decorator, for every extension point of the project.

An entry has a builder, optionally the pydantic model of the options it accepts (checked where a
workload names it) and `info` (plain facts, e.g. a model's input shape). Besides fixed names a
registry may resolve a namespace (`torchvision:<name>`, `threads=<N>`: the builder receives the
item first) and, when it accepts import paths, `package.module:attribute` names of user code.

A built-in entry may be declared rather than registered (`declare`): its name, options and info
given where the registry is, its builder named by import path and imported when it is first
used, so that reading and checking a workload imports no builder's module (nor torch).
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import inspect
import os
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from model_explorer.errors import UserError, did_you_mean

T = TypeVar("T")

IMPORT_PATH = "package.module:factory"


class Entry(Generic[T]):
    """One registered builder, the pydantic model of the options it accepts, and facts about it.
    A declared entry's builder is its `package.module:attribute` until first read."""

    def __init__(self, name: str, builder: T, options: Any = None, info: Any = None) -> None:
        self.name, self.options, self.info = name, options, info
        self._builder: Any = builder
        self._declared: str | None = None

    @classmethod
    def declared(cls, name: str, path: str, options: Any = None, info: Any = None) -> Entry[T]:
        entry: Entry[T] = cls(name, None, options, info)  # type: ignore[arg-type]
        entry._declared = path
        return entry

    @property
    def builder(self) -> T:
        if self._declared is not None:
            self._builder = pkgutil.resolve_name(self._declared)
            self._declared = None
        return self._builder  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        builder = self._declared or self._builder
        return f"Entry({self.name!r}, {builder!r}, options={self.options!r})"


@dataclass(frozen=True)
class Namespace:
    """Names `<prefix><separator><item>`; `placeholder` shows the item's form in listings
    (`listed`: false for names only code makes, which no file or command line can give)."""

    prefix: str
    separator: str
    builder: Callable[..., Any] | str  # a declared namespace's builder by import path
    placeholder: str
    listed: bool = True

    @property
    def form(self) -> str:
        return f"{self.prefix}{self.separator}{self.placeholder}"


class Registry(Generic[T]):
    """Maps names to builders; an unknown name lists the known ones and suggests the closest.

    `imports` (e.g. "model factory") lets `resolve` import `package.module:attribute` names,
    shown in listings as `import_form`."""

    def __init__(
        self,
        kind: str,
        imports: str | None = None,
        import_form: str = IMPORT_PATH,
        import_options: Any = None,
    ) -> None:
        self.kind = kind
        self.imports = imports
        self.import_form = import_form
        # The pydantic model of the keys an imported entry takes where a workload names it.
        self.import_options = import_options
        self.adapt_import: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
        self._adapter_path: str | None = None
        self._entries: dict[str, Entry[T]] = {}
        self._namespaces: dict[str, Namespace] = {}

    def register(self, name: str, *, options: Any = None, info: Any = None) -> Callable[[T], T]:
        """Decorator registering `builder` under `name` (with its options model and info)."""

        def decorator(builder: T) -> T:
            self._add(Entry(name, builder, options, info))
            return builder

        return decorator

    def declare(self, name: str, path: str, *, options: Any = None, info: Any = None) -> None:
        """Declare a built-in entry whose builder, `package.module:attribute`, is imported when
        first used (see the module docstring)."""
        self._add(Entry.declared(name, path, options, info))

    def _add(self, entry: Entry[T]) -> None:
        if entry.name in self._entries:
            raise ValueError(f"{self.kind} '{entry.name}' is registered twice")
        self._entries[entry.name] = entry

    def register_namespace(
        self,
        prefix: str,
        *,
        separator: str = ":",
        placeholder: str = "<name>",
        listed: bool = True,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator for the builder of every name `prefix<separator><item>` (item first)."""

        def decorator(builder: Callable[..., Any]) -> Callable[..., Any]:
            space = Namespace(prefix, separator, builder, placeholder, listed)
            self._namespaces[prefix] = space
            return builder

        return decorator

    def declare_namespace(
        self, prefix: str, path: str, *, separator: str = ":", placeholder: str = "<name>"
    ) -> None:
        """A namespace whose builder, `package.module:attribute`, is imported when a name of it
        is first resolved (see `declare`)."""
        self._namespaces[prefix] = Namespace(prefix, separator, path, placeholder)

    def adapt_imports(
        self, adapter: Callable[[Callable[..., Any]], Callable[..., Any]]
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: `adapter(imported)` turns an imported callable into this registry's kind of
        builder (without it, the imported callable is the builder)."""
        self.adapt_import = adapter
        return adapter

    def declare_import_adapter(self, path: str) -> None:
        """The adapter of imported callables (see `adapt_imports`), by its import path: imported
        when an import path is first resolved."""
        self._adapter_path = path

    def _adapter(self) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
        if self.adapt_import is None and self._adapter_path is not None:
            self.adapt_import = pkgutil.resolve_name(self._adapter_path)
        return self.adapt_import

    def names(self, pattern: str | None = None) -> list[str]:
        """Registered names, sorted, optionally filtered by a shell-style pattern."""
        names = sorted(self._entries)
        return [n for n in names if pattern is None or fnmatch.fnmatch(n, pattern)]

    def forms(self) -> list[str]:
        """The forms of names beyond the registered ones: namespaces, then import paths."""
        forms = [space.form for space in self._namespaces.values() if space.listed]
        return forms + ([self.import_form] if self.imports else [])

    def entries(self) -> list[Entry[T]]:
        return [self._entries[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def namespace(self, name: str) -> tuple[Namespace, str] | None:
        """The namespace and item of a `prefix<separator>item` name, else None."""
        for space in self._namespaces.values():
            head = space.prefix + space.separator
            if name.startswith(head):
                return space, name[len(head) :]
        return None

    def accepts(self, name: str) -> bool:
        """Whether `resolve` may find `name`: registered, in a namespace or an import path."""
        imported = bool(self.imports) and ":" in name
        return name in self or self.namespace(name) is not None or imported

    def lookup(self, name: str) -> Entry[T] | None:
        """The entry of a registered name or, for a registry that takes them, of an import path
        (options `import_options`; its builder is imported by `resolve`, not here), else None."""
        if name in self._entries:
            return self._entries[name]
        if self.namespace(name) is not None:  # its builder, bound to the item, takes no options
            return Entry(name, None)  # type: ignore[arg-type]
        if self.imports and ":" in name:
            return Entry(name, None, self.import_options)  # type: ignore[arg-type]
        return None

    def get(self, name: str, where: str | None = None) -> Entry[T]:
        """The entry for `name`; `where` names the workload key for the error message."""
        try:
            return self._entries[name]
        except KeyError:
            prefix = f"{where}: " if where else ""
            known = ", ".join(self.names() + self.forms())
            raise UserError(
                f"{prefix}unknown {self.kind} '{name}'{did_you_mean(name, self._entries)}; "
                f"known: {known}"
            ) from None

    def resolve(
        self, name: str, where: str | None = None, folders: Sequence[Path] = ()
    ) -> Callable[..., Any]:
        """The builder of any name this registry accepts: registered, namespaced (the item bound
        as first argument) or, for registries that take them, an imported callable (its module
        found in `folders`, the workload's root, as well; see `import_object`)."""
        if name in self._entries:
            return self._entries[name].builder  # type: ignore[return-value]
        found = self.namespace(name)
        if found is not None:
            space, item = found
            builder = space.builder
            if isinstance(builder, str):  # declared: imported now
                builder = pkgutil.resolve_name(builder)
            return functools.partial(builder, item)
        if self.imports and ":" in name:
            imported = import_object(name, where or self.kind, self.imports, folders)
            adapt = self._adapter()
            return adapt(imported) if adapt else imported
        return self.get(name, where).builder  # type: ignore[return-value]


def import_object(
    path: str, where: str, what: str = "factory", folders: Sequence[Path] = ()
) -> Callable[..., Any]:
    """The callable named by 'package.module:attribute', imported from an installed package,
    else from `folders` (a workload's root: where its data paths start too) or the working
    directory, where research code usually sits."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise UserError(f"{where}: '{path}' is not of the form '{IMPORT_PATH}'")
    if module_name == "python":  # api/search.py's placeholders of objects given in Python
        raise UserError(
            f"{where}: '{path}' stands for an object given to model_explorer.search in Python, "
            "which no command can rebuild; in Python, model_explorer.load(RESULTS, model, data) "
            "gives the search back (its model and export; model_explorer.analysis.debug.api."
            "debug_search debugs it)"
        )
    searched = list(dict.fromkeys(str(Path(f).resolve()) for f in (*folders, os.getcwd())))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = [folder for folder in searched if folder not in sys.path]
        if not missing or error.name != module_name.split(".")[0]:
            raise UserError(
                f"{where}: cannot import '{module_name}' ({error}); looked in installed "
                f"packages and in {' and '.join(searched)}: put it there, or install it"
            ) from error
        sys.path[:0] = missing
        return import_object(path, where, what, folders)
    found = getattr(module, attribute, None)
    if found is None:
        raise UserError(f"{where}: module '{module_name}' has no attribute '{attribute}'")
    if not callable(found):
        raise UserError(f"{where}: '{path}' is a {type(found).__name__}, not a {what}")
    return found


def call_user_code(
    function: Callable[..., Any],
    kwargs: dict[str, Any],
    called: str,
    arguments_at: str,
    raised_at: str,
    fix: str,
) -> Any:
    """`function(**kwargs)`, where `function` is the user's code (or a library's) named in a
    workload: arguments its signature refuses, and anything it raises, become one UserError
    naming the key (`arguments_at`, `raised_at`), what was `called` and what to do (`fix`)."""
    try:
        signature = inspect.signature(function)
    except ValueError:
        signature = None  # a builtin without an inspectable signature: let the call decide
    if signature is not None:
        try:
            signature.bind(**kwargs)
        except TypeError as error:
            raise UserError(
                f"{arguments_at}: {called} does not accept these arguments ({error}); it takes "
                f"{signature}"
            ) from None
    try:
        return function(**kwargs)
    except UserError:
        raise
    except Exception as error:  # the user's code failed: say which, and why
        text = str(error).splitlines()[0] if str(error) else ""
        raise UserError(
            f"{raised_at}: {called} raised {type(error).__name__}{': ' + text if text else ''}; "
            f"{fix}"
        ) from error
