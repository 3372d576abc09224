"""The runtimes the project runs models in (onnxruntime, OpenVINO, Apache TVM, LiteRT): one
Runtime class per backend in a module of its own, registered in RUNTIMES, which compare's
environments, the deployment check and localisation's taps all use. Importing this package
registers the shipped runtimes; none imports its backend until it is made."""

# Explicit imports register the shipped runtimes (each module imports its backend lazily).
from model_explorer.deployment.runtimes import litert as _litert  # noqa: F401
from model_explorer.deployment.runtimes import onnxruntime as _onnxruntime  # noqa: F401
from model_explorer.deployment.runtimes import openvino as _openvino  # noqa: F401
from model_explorer.deployment.runtimes import tvm as _tvm  # noqa: F401
from model_explorer.deployment.runtimes.base import (
    RUNTIMES,
    Kernel,
    Runtime,
    RuntimeUnavailable,
    as_input,
    describe_kernels,
    file_runtimes,
    layer_of,
    missing_package,
    open_runtime,
    register_runtime,
    runtime_setting,
)

__all__ = [
    "RUNTIMES",
    "Kernel",
    "Runtime",
    "RuntimeUnavailable",
    "as_input",
    "describe_kernels",
    "file_runtimes",
    "layer_of",
    "missing_package",
    "open_runtime",
    "register_runtime",
    "runtime_setting",
]
