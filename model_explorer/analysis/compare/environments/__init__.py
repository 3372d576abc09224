"""Environments of `compare`: named ways to run the same model on the same inputs, each a
registered entry (fixed names, `threads=N`, every runtime of runtimes/ as `NAME` and
`NAME:SETTING`, `quantized:RESULTS#ID`, `deployed-NAME:RESULTS#ID`, `package.module:factory`)."""

from __future__ import annotations

# Explicit imports register the shipped environments.
from model_explorer.analysis.compare.environments import deployed as _deployed  # noqa: F401
from model_explorer.analysis.compare.environments import eager as _eager  # noqa: F401
from model_explorer.analysis.compare.environments import quantized as _quantized  # noqa: F401
from model_explorer.analysis.compare.environments import runtime as _runtime  # noqa: F401
from model_explorer.analysis.compare.environments import user as _user  # noqa: F401
from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    environment,
    logits,
    operator_outputs,
    register_environment,
)
from model_explorer.analysis.compare.environments.eager import (
    CompileEnvironment,
    CudaEnvironment,
    ThreadsEnvironment,
    TorchEnvironment,
    compiler,
)
from model_explorer.analysis.compare.environments.quantized import QuantizedEnvironment
from model_explorer.analysis.compare.environments.runtime import RuntimeEnvironment
from model_explorer.analysis.compare.environments.user import CallableEnvironment, UserEnvironment

__all__ = [
    "ENVIRONMENTS",
    "CallableEnvironment",
    "CompileEnvironment",
    "CudaEnvironment",
    "Environment",
    "EnvironmentSkipped",
    "QuantizedEnvironment",
    "RuntimeEnvironment",
    "ThreadsEnvironment",
    "TorchEnvironment",
    "UserEnvironment",
    "compiler",
    "environment",
    "logits",
    "operator_outputs",
    "register_environment",
]
