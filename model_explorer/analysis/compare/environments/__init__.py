"""Environments of `compare`: named ways to run the same model on the same inputs, each a
registered entry (fixed names, `threads=N`, `quantized:RESULTS#ID`, `deployed:RESULTS#ID`,
`package.module:factory`)."""

from __future__ import annotations

# Explicit imports register the shipped environments.
from model_explorer.analysis.compare.environments import deployed as _deployed  # noqa: F401
from model_explorer.analysis.compare.environments import eager as _eager  # noqa: F401
from model_explorer.analysis.compare.environments import litert as _litert  # noqa: F401
from model_explorer.analysis.compare.environments import onnx as _onnx  # noqa: F401
from model_explorer.analysis.compare.environments import openvino as _openvino  # noqa: F401
from model_explorer.analysis.compare.environments import quantized as _quantized  # noqa: F401
from model_explorer.analysis.compare.environments import tvm as _tvm  # noqa: F401
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
from model_explorer.analysis.compare.environments.onnx import OnnxRuntimeEnvironment
from model_explorer.analysis.compare.environments.quantized import QuantizedEnvironment
from model_explorer.analysis.compare.environments.user import CallableEnvironment, UserEnvironment

__all__ = [
    "ENVIRONMENTS",
    "CallableEnvironment",
    "CompileEnvironment",
    "CudaEnvironment",
    "Environment",
    "EnvironmentSkipped",
    "OnnxRuntimeEnvironment",
    "QuantizedEnvironment",
    "ThreadsEnvironment",
    "TorchEnvironment",
    "UserEnvironment",
    "compiler",
    "environment",
    "logits",
    "operator_outputs",
    "register_environment",
]
