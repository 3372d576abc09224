"""The runtimes that execute an exported ONNX file on the CPU: onnxruntime, OpenVINO and Apache
TVM (tvm_relax.py), each behind its extra, and what each says it runs in integer arithmetic.

A runtime is a registry entry (RUNTIMES); its builder opens a file and returns a `Session`:
`run(inputs)` on a float32 array, and `kernels()`, the products (convolutions, matrix
products) with the precision the runtime executes them in. Each runtime opens a file as its
user would by default (`onnxruntime`: an InferenceSession with default SessionOptions, all graph
optimisations; `openvino`: compile_model for the CPU with no settings, so the inference
precision the CPU plugin picks, bf16 on processors with it; `tvm`: tvm.compile's default
build) and, named as `RUNTIME:SETTING`, under another setting of its `settings`
(`onnxruntime:basic`, `openvino:f32`, `tvm:O3`), which a check runs beside the default.
onnxruntime's kernels are read from the optimised graph it saves (`optimized_model_filepath`),
OpenVINO's from its runtime model.
"""

from __future__ import annotations

import importlib.metadata
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.deployment.session import Kernel, Session, missing_package
from model_explorer.deployment.tvm_relax import TvmSession
from model_explorer.errors import UserError, did_you_mean
from model_explorer.registry import Registry

RuntimeBuilder = Callable[..., Session]
RUNTIMES: Registry[RuntimeBuilder] = Registry("runtime")

# onnxruntime's operators that compute a product of integers.
ORT_INTEGER_KERNELS = {
    "QLinearConv",
    "ConvInteger",
    "MatMulInteger",
    "QLinearMatMul",
    "QGemm",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "MatMulNBits",
}
ORT_FLOAT_KERNELS = {"Conv", "FusedConv", "NchwcConv", "Gemm", "MatMul", "FusedMatMul", "FusedGemm"}
# onnxruntime's graph optimisation levels by setting; default: SessionOptions' own
ORT_LEVELS = {
    "extended": "ORT_ENABLE_EXTENDED",
    "basic": "ORT_ENABLE_BASIC",
    "disabled": "ORT_DISABLE_ALL",
}


class OnnxRuntimeSession(Session):
    name = "onnxruntime"
    description = "ONNX Runtime, CPU execution provider (extra: onnx)"
    settings = {
        "default": "default SessionOptions: graph optimisation level ORT_ENABLE_ALL",
        **{name: f"graph optimisation level {level}" for name, level in ORT_LEVELS.items()},
    }

    def __init__(self, path: Path, setting: str = "default") -> None:
        try:
            import onnxruntime
        except ImportError:
            raise missing_package("runtime onnxruntime", "onnx") from None
        self.setting = setting
        self.version = onnxruntime.__version__
        self.folder = tempfile.TemporaryDirectory(prefix="model_explorer_ort_")
        self.optimized = Path(self.folder.name) / "optimized.onnx"
        options = onnxruntime.SessionOptions()
        if setting in ORT_LEVELS:
            level = getattr(onnxruntime.GraphOptimizationLevel, ORT_LEVELS[setting])
            options.graph_optimization_level = level
        options.optimized_model_filepath = str(self.optimized)
        options.log_severity_level = 3  # its warning that the saved graph is machine-specific
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self.input = self.session.get_inputs()[0].name

    def run(self, inputs: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: inputs})[0]

    def kernels(self) -> list[Kernel]:
        import onnx

        found = []
        for node in onnx.load(str(self.optimized)).graph.node:
            if node.op_type in ORT_INTEGER_KERNELS:
                found.append(Kernel(node.name, node.op_type, "int8"))
            elif node.op_type in ORT_FLOAT_KERNELS:
                found.append(Kernel(node.name, node.op_type, "f32"))
        return found


class OpenVinoSession(Session):
    name = "openvino"
    description = "OpenVINO on the CPU (extra: openvino)"
    settings = {
        "default": "compile_model for the CPU with no settings",
        "f32": "compile_model for the CPU with float32 inference precision",
    }
    _PRODUCTS = ("Convolution", "FullyConnected", "MatMul", "Deconvolution", "GroupConvolution")

    def __init__(self, path: Path, setting: str = "default") -> None:
        try:
            import openvino
            import openvino.properties.hint as hints
        except ImportError:
            raise missing_package("runtime openvino", "openvino") from None
        self.path, self.setting = path, setting
        self.version = importlib.metadata.version("openvino")
        config = {hints.inference_precision: openvino.Type.f32} if setting == "f32" else {}
        try:
            self.compiled = openvino.Core().compile_model(str(path), "CPU", config)
        except RuntimeError as error:
            raise UserError(f"runtime openvino cannot compile '{path}': {_reason(error)}") from None
        self.precision = self.compiled.get_property(hints.inference_precision).to_string()

    def described(self) -> str:
        # the precision the CPU plugin chose: bf16 by default on a processor with it
        return f"{super().described()} (inference precision {self.precision})"

    def run(self, inputs: np.ndarray) -> np.ndarray:
        # OpenVINO creates a layer's kernel when it first runs: a layer its CPU plugin has no
        # kernel for on this processor fails here (a Linear with INT4 weights below AVX2)
        try:
            return self.compiled(inputs)[0]
        except RuntimeError as error:
            raise UserError(
                f"runtime openvino cannot run '{self.path}' on this processor: {_reason(error)}"
            ) from None

    def kernels(self) -> list[Kernel]:
        found = []
        outputs = _output_products(self.path)
        for op in self.compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            kind = info["layerType"].astype(str)
            if kind in self._PRODUCTS:
                # A fused product that writes a graph output is named after the output.
                name = outputs.get(op.get_friendly_name(), op.get_friendly_name())
                found.append(Kernel(name, kind, info["runtimePrecision"].astype(str)))
        return found


def _reason(error: RuntimeError) -> str:
    """The line of an OpenVINO exception that says what failed (it wraps it in source paths)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if "Failed" in line or "not" in line]
    return (said or lines or ["unknown error"])[-1]


def openvino_cpu(source: Any) -> Any:
    """`source` (a file or an openvino.Model) compiled for OpenVINO's CPU plugin in float32, the
    precision compare's openvino environment runs a float model in (its default on CPUs with
    bf16 would run it in bf16)."""
    import openvino
    import openvino.properties.hint as hints

    return openvino.Core().compile_model(
        source, "CPU", {hints.inference_precision: openvino.Type.f32}
    )


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
        if node is not None and node.op_type in ORT_FLOAT_KERNELS:
            found[output.name] = node.name
    return found


for _session in (OnnxRuntimeSession, OpenVinoSession, TvmSession):
    # what `model-explorer list runtimes` prints beside the name
    _session.description += "; settings: " + ", ".join(_session.settings)
    RUNTIMES.register(_session.name)(_session)
    # a namespace's builder receives the item first: `RUNTIMES.resolve("onnxruntime:basic")`
    RUNTIMES.register_namespace(_session.name, placeholder="SETTING")(
        lambda setting, path, session=_session: session(path, setting)
    )


def runtime_setting(name: str, where: str = "--runtime") -> tuple[type[Session], str]:
    """The Session class and setting a runtime's name stands for: `onnxruntime` (its default
    setting) or `onnxruntime:basic`; an unknown runtime or setting is one sentence."""
    runtime, _, setting = name.partition(":")
    session: Any = RUNTIMES.get(runtime, where).builder
    setting = setting or "default"
    if setting not in session.settings:
        raise UserError(
            f"{where}: runtime {runtime} has no setting '{setting}'"
            f"{did_you_mean(setting, session.settings)}; its settings: "
            + ", ".join(session.settings)
        )
    return session, setting


def open_session(runtime: str, path: Path, where: str = "--runtime") -> Session:
    """The file at `path` opened by the runtime named `runtime` (`NAME` or `NAME:SETTING`)."""
    session, setting = runtime_setting(runtime, where)
    return session(path, setting)  # type: ignore[call-arg]


def layer_of(node: str, layers: Iterable[str]) -> str:
    """The layer a runtime's product node belongs to: the export names each product after its
    layer, and runtimes add to the name when they fuse (`3_token_22`, `3/WithoutBiases`); the
    node's own name where no layer matches."""
    matches = [
        layer
        for layer in layers
        if node == layer or (node.startswith(layer) and node[len(layer)] in "/_")
    ]
    return max(matches, key=len) if matches else node


def describe_kernels(kernels: list[Kernel], layers: Iterable[str]) -> dict[str, list[str]]:
    """{'integer': [layers], 'float': [layers]} of a session's products."""
    layers = list(layers)
    return {
        "integer": [layer_of(k.node, layers) for k in kernels if k.integer],
        "float": [layer_of(k.node, layers) for k in kernels if not k.integer],
    }
