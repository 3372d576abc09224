"""Environments of `compare`: named ways to run the same model on the same inputs, each a
registered entry (fixed names, `threads=N`, every runtime of deployment/runtimes/ as `NAME` and
`NAME:SETTING`, `quantized:RESULTS#ID`, `deployed-NAME:RESULTS#ID`, `package.module:factory`)."""

from __future__ import annotations

from typing import Any

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
    logits,
    operator_outputs,
    register_environment,
)
from model_explorer.analysis.compare.environments.base import environment as _environment
from model_explorer.analysis.compare.environments.deployed import register_deployed_environments
from model_explorer.analysis.compare.environments.eager import (
    CompileEnvironment,
    CudaEnvironment,
    ThreadsEnvironment,
    TorchEnvironment,
    compiler,
)
from model_explorer.analysis.compare.environments.quantized import QuantizedEnvironment
from model_explorer.analysis.compare.environments.runtime import (
    RuntimeEnvironment,
    register_runtime_environments,
)
from model_explorer.analysis.compare.environments.user import CallableEnvironment, UserEnvironment


def with_every_runtime() -> None:
    """Add the environments of runtimes registered (runtimes.register_runtime) since this
    package was imported: `NAME`, `NAME:SETTING`, `deployed-NAME:RESULTS#ID`."""
    register_runtime_environments()
    register_deployed_environments()


def environment(spec: str, context: Any = None) -> Environment:
    """The Environment named by `spec` (every registered runtime's included); `context` (a
    WorkloadContext) is needed by quantized and deployed environments."""
    with_every_runtime()
    return _environment(spec, context)


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
    "with_every_runtime",
]
