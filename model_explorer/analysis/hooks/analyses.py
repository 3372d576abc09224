"""Analyses for `analyze`: the shipped ones by name (a registry), or a user's file, loaded and
instantiated."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from model_explorer.errors import UserError
from model_explorer.schema.registry import Registry

TEMPLATES = Path(__file__).parent / "templates"

# name -> the shipped analysis file; `info` is its one-line description.
ANALYSES: Registry[Path] = Registry("analysis")
for _name, _about in {
    "template": "every hook, empty: a start for your own analysis",
    "activation_ranges": "per-operator min, max and |x| percentiles, written as JSON",
    "zero_ratio": "per-operator share of exact zeros in the output, written as CSV",
    "histograms": "input histograms of every convolution and linear layer, as PNG files",
}.items():
    ANALYSES.register(_name, info=_about)(TEMPLATES / f"{_name}.py")


def analysis_path(spec: str) -> Path:
    """A shipped analysis by name, or the user's file."""
    if spec in ANALYSES:
        return ANALYSES.get(spec).builder
    path = Path(spec)
    if not path.is_file():
        raise UserError(
            f"--analysis: '{spec}' is neither a file nor one of {', '.join(ANALYSES.names())}"
        )
    return path


def template_text() -> str:
    """The source of the template analysis (`analyze --print-template`)."""
    return ANALYSES.get("template").builder.read_text()


def load_analysis(spec: str, args: str | None = None, dalgona: bool = False) -> tuple[Any, str]:
    """An instance of the analysis file's class, and the file's path. The file's directory is
    put on sys.path (as dalgona does), so that helper modules beside it import.

    Without `dalgona` the file defines one class, built with `args` if its constructor takes
    them. With `dalgona` (dalgona's rule) the class named as the file (the only one if none
    is) is built without arguments; `args` goes to its StartAnalysis."""
    path = analysis_path(spec)
    if dalgona and spec in ANALYSES:
        raise UserError(
            f"--analysis: the shipped '{spec}' is written for analyze without --dalgona; give "
            "an analysis file written to dalgona's conventions"
        )
    folder = str(path.resolve().parent)
    if spec not in ANALYSES and folder not in sys.path:
        sys.path.append(folder)
    module = _load_module(path)
    classes = [
        value
        for value in vars(module).values()
        if inspect.isclass(value) and value.__module__ == module.__name__
    ]
    if dalgona:
        return _dalgona_class(path, classes)(), str(path)
    if len(classes) != 1:
        raise UserError(
            f"--analysis: '{path}' must define exactly one class, it defines {len(classes)}"
        )
    cls = classes[0]
    takes_args = len(inspect.signature(cls).parameters) > 0
    if args is not None and not takes_args:
        raise UserError(f"--analysis-args: {cls.__name__}() takes no arguments")
    instance = cls(args if args is not None else "") if takes_args else cls()
    return instance, str(path)


def _dalgona_class(path: Path, classes: list[type]) -> type:
    """dalgona's choice: the class named as the file (else the file's only class), which must
    build without arguments."""
    named = [c for c in classes if c.__name__ == path.stem]
    if len(named) != 1 and len(classes) != 1:
        raise UserError(
            f"--analysis: '{path}' must define a class named {path.stem} (dalgona builds "
            f"that one), it defines {', '.join(c.__name__ for c in classes) or 'none'}"
        )
    cls = (named or classes)[0]
    if any(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in inspect.signature(cls).parameters.values()
    ):
        raise UserError(
            f"--analysis: {cls.__name__}() needs arguments; dalgona builds the class "
            "without any and gives --analysis_args to StartAnalysis(args)"
        )
    return cls


def _load_module(path: Path) -> Any:
    name = f"model_explorer_analysis_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as error:
        raise UserError(
            f"--analysis: '{path}' does not load ({type(error).__name__}: {error})"
        ) from error
    return module
