"""OpenVINO on the CPU: a file or a PyTorch model (its TorchScript-based frontend,
`convert_model`) compiled for the CPU plugin with no settings, so in the inference precision the
plugin picks (bf16 on processors with it), or in float32; its kernels read from its runtime
model."""

from __future__ import annotations

import importlib.metadata
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.deployment.runtimes.base import (
    Kernel,
    Runtime,
    missing_package,
    register_runtime,
)
from model_explorer.deployment.runtimes.onnxruntime import FLOAT_KERNELS
from model_explorer.errors import UserError

_PRODUCTS = ("Convolution", "FullyConnected", "MatMul", "Deconvolution", "GroupConvolution")


@register_runtime
class OpenVino(Runtime):
    name = "openvino"
    description = "OpenVINO on the CPU (extra: openvino)"
    extra = "openvino"
    takes_threads = True
    profiles = True
    settings = {
        "default": "compile_model for the CPU with no settings",
        "f32": "compile_model for the CPU with float32 inference precision",
    }
    # compare runs a float model in float32: the default on CPUs with bf16 would run in bf16
    compare_setting = "f32"

    def require(self) -> None:
        try:
            import openvino  # noqa: F401
        except ImportError:
            raise missing_package(f"runtime {self.name}", self.extra) from None
        self.version = importlib.metadata.version("openvino")
        self.path: Path | None = None
        self.compiled: Any = None

    def activate(self, path: Path) -> None:
        self.path = path
        try:
            self._compile(str(path))
        except RuntimeError as error:
            raise UserError(f"runtime openvino cannot compile '{path}': {_reason(error)}") from None

    def activate_model(self, model: Any, example: Any, folder: Path) -> None:
        """The model as OpenVINO's PyTorch frontend converts it (traced on one sample, the
        batch axis free)."""
        import openvino
        import torch

        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._compile(openvino.convert_model(model.eval(), example_input=example[:1]))

    def _compile(self, source: Any) -> None:
        import openvino
        import openvino.properties as properties
        import openvino.properties.hint as hints

        config: dict[Any, Any] = (
            {hints.inference_precision: openvino.Type.f32} if self.setting == "f32" else {}
        )
        if self.threads is not None:
            config[properties.inference_num_threads] = self.threads
        if self.profiling:
            config[properties.enable_profiling] = True
        self.compiled = openvino.Core().compile_model(source, "CPU", config)
        self.precision = self.compiled.get_property(hints.inference_precision).to_string()

    def described(self) -> str:
        # the precision the CPU plugin chose: bf16 by default on a processor with it
        return f"{super().described()} (inference precision {self.precision})"

    def infer(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        results = self._results(inputs)
        return {name: value for port, value in results.items() for name in port.get_names()}

    def run(self, inputs: np.ndarray) -> np.ndarray:
        return self._results(inputs)[0]

    def _results(self, inputs: np.ndarray) -> Any:
        # OpenVINO creates a layer's kernel when it first runs: a layer its CPU plugin has no
        # kernel for on this processor fails here (a Linear with INT4 weights below AVX2)
        try:
            return self.compiled(inputs)
        except RuntimeError as error:
            raise UserError(
                f"runtime openvino cannot run '{self.path}' on this processor: {_reason(error)}"
            ) from None

    def infer_feeds(self, feeds: dict[str, np.ndarray]) -> Any:
        return self.compiled(feeds)

    def profile(self, feeds: dict[str, np.ndarray], runs: int) -> dict[str, float]:
        """The CPU plugin's own profile (PERF_COUNT) of the executed nodes, medians."""
        request = self.compiled.create_infer_request()
        found: dict[str, list[float]] = {}
        for _ in range(runs + 1):
            request.infer(feeds)
            for node in request.profiling_info:
                if node.status.name == "EXECUTED":
                    found.setdefault(node.node_name, []).append(
                        node.real_time.total_seconds() * 1000
                    )
        return {name: float(np.median(times[1:] or times)) for name, times in found.items()}

    def kernels(self) -> list[Kernel]:
        found = []
        outputs = _output_products(self.path) if self.path else {}
        for op in self.compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            kind = info["layerType"].astype(str)
            if kind in _PRODUCTS:
                # A fused product that writes a graph output is named after the output.
                name = outputs.get(op.get_friendly_name(), op.get_friendly_name())
                found.append(Kernel(name, *_precision(op, kind, info)))
        return found

    def deactivate(self) -> None:
        self.compiled = None


def _precision(op: Any, kind: str, info: Any) -> tuple[str, str]:
    """(operator, precision) of a product in the runtime model. Its precision is the type of
    the activation it reads: `runtimePrecision` is that of an integer kernel (u8), but of the
    weights where the plugin only decompresses them (a FullyConnected with i8 weights reading
    f32 or bf16 activations), which the operator then says."""
    activation = op.input(0).get_element_type().to_string()
    stored = info["runtimePrecision"].astype(str)
    if stored != activation and not activation.startswith(("i", "u")):
        return f"{kind}, {stored} weights", activation
    return kind, activation


def _reason(error: RuntimeError) -> str:
    """The line of an OpenVINO exception that says what failed (it wraps it in source paths)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if "Failed" in line or "not" in line]
    return (said or lines or ["unknown error"])[-1]


def _output_products(path: Path) -> dict[str, str]:
    """Graph output name -> the product node that computes it (through its bias Add)."""
    import onnx

    graph = onnx.load(str(path)).graph
    producers = {output: node for node in graph.node for output in node.output}
    found = {}
    for output in graph.output:
        node = producers.get(output.name)
        if node is not None and node.op_type == "Add":
            node = producers.get(node.input[0])
        if node is not None and node.op_type in FLOAT_KERNELS:
            found[output.name] = node.name
    return found
