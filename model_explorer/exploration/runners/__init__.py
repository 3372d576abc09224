"""Where a generation's genomes are evaluated: `serial`, `processes` or `dask` (imported only
when chosen), each a registered runner with its own options."""

from __future__ import annotations

# Explicit imports register the shipped runners; Dask itself loads only when it is chosen.
from model_explorer.exploration.runners import dask as _dask  # noqa: F401
from model_explorer.exploration.runners import processes as _processes  # noqa: F401
from model_explorer.exploration.runners import serial as _serial  # noqa: F401
from model_explorer.exploration.runners.base import (
    RUNNERS,
    Done,
    Runner,
    RunnerSpec,
    build_runner,
    register_runner,
)
from model_explorer.exploration.runners.processes import ProcessRunner
from model_explorer.exploration.runners.recipe import ProblemRecipe
from model_explorer.exploration.runners.serial import SerialRunner

__all__ = [
    "RUNNERS",
    "Done",
    "ProblemRecipe",
    "ProcessRunner",
    "Runner",
    "RunnerSpec",
    "SerialRunner",
    "build_runner",
    "register_runner",
]
