"""The search: NSGA-II over a Problem, every evaluation recorded, resumable."""

from __future__ import annotations

from model_explorer.exploration.explorer import Explorer, make_algorithm
from model_explorer.exploration.runners import ProcessRunner, Runner, SerialRunner, build_runner

__all__ = ["Explorer", "ProcessRunner", "Runner", "SerialRunner", "build_runner", "make_algorithm"]
