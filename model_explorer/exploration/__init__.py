"""The search: NSGA-II over a Problem, every evaluation recorded, resumable."""

from __future__ import annotations

from model_explorer.exploration.explorer import Explorer, make_algorithm
from model_explorer.exploration.runners import Runner, SerialRunner

__all__ = ["Explorer", "Runner", "SerialRunner", "make_algorithm"]
