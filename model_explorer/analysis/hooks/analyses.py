"""Analyses for `analyze`: the shipped ones by name (a registry), or a user's file, loaded and
instantiated."""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from model_explorer.errors import UserError
from model_explorer.registry import Registry

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


def load_analysis(spec: str, args: str | None = None) -> tuple[Any, str]:
    """An instance of the one class the analysis file defines, and the file's path."""
    path = analysis_path(spec)
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
    classes = [
        value
        for value in vars(module).values()
        if inspect.isclass(value) and value.__module__ == name
    ]
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
