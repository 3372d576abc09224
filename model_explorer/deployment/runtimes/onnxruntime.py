"""ONNX Runtime on the CPU: an InferenceSession as its user opens one (default SessionOptions,
every graph optimisation), or at another graph optimisation level; its kernels read from the
optimised graph it saves (`optimized_model_filepath`)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from model_explorer.deployment.runtimes.base import (
    Kernel,
    Runtime,
    missing_package,
    register_runtime,
)

# onnxruntime's operators that compute a product of integers.
INTEGER_KERNELS = {
    "QLinearConv",
    "ConvInteger",
    "MatMulInteger",
    "QLinearMatMul",
    "QGemm",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "MatMulNBits",
}
FLOAT_KERNELS = {"Conv", "FusedConv", "NchwcConv", "Gemm", "MatMul", "FusedMatMul", "FusedGemm"}
# onnxruntime's graph optimisation levels by setting; default: SessionOptions' own
LEVELS = {
    "extended": "ORT_ENABLE_EXTENDED",
    "basic": "ORT_ENABLE_BASIC",
    "disabled": "ORT_DISABLE_ALL",
}


@register_runtime
class OnnxRuntime(Runtime):
    name = "onnxruntime"
    description = "ONNX Runtime, CPU execution provider (extra: onnx)"
    extra = "onnx"
    takes_threads = True
    # Its QDQ fusion makes a QLinearConv of DequantizeLinear -> Conv -> QuantizeLinear only;
    # a Gemm or MatMul fuses with a float output too (QGemm, MatMulIntegerToFloat).
    quantized_output_for = ("Conv",)
    settings = {
        "default": "default SessionOptions: graph optimisation level ORT_ENABLE_ALL",
        **{name: f"graph optimisation level {level}" for name, level in LEVELS.items()},
    }

    def require(self) -> None:
        try:
            import onnx  # noqa: F401 - its exporter and the kernels' reading need it
            import onnxruntime
        except ImportError:
            raise missing_package(f"runtime {self.name}", self.extra) from None
        self.version = onnxruntime.__version__
        self.session: Any = None

    def activate(self, path: Path) -> None:
        import onnxruntime

        self.folder = tempfile.TemporaryDirectory(prefix="model_explorer_ort_")
        self.optimized = Path(self.folder.name) / "optimized.onnx"
        options = onnxruntime.SessionOptions()
        if self.setting in LEVELS:
            level = getattr(onnxruntime.GraphOptimizationLevel, LEVELS[self.setting])
            options.graph_optimization_level = level
        options.optimized_model_filepath = str(self.optimized)
        options.log_severity_level = 3  # its warning that the saved graph is machine-specific
        if self.threads is not None:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self.input = self.session.get_inputs()[0].name
        self.outputs = [output.name for output in self.session.get_outputs()]

    def infer(self, inputs: np.ndarray) -> dict[str, np.ndarray]:
        values = self.session.run(self.outputs, {self.input: inputs})
        return dict(zip(self.outputs, values, strict=True))

    def run(self, inputs: np.ndarray) -> np.ndarray:
        return self.session.run(self.outputs[:1], {self.input: inputs})[0]

    def infer_feeds(self, feeds: dict[str, np.ndarray]) -> Any:
        return self.session.run(self.outputs, feeds)

    def kernels(self) -> list[Kernel]:
        import onnx

        found = []
        for node in onnx.load(str(self.optimized)).graph.node:
            if node.op_type in INTEGER_KERNELS:
                found.append(Kernel(node.name, node.op_type, "int8"))
            elif node.op_type in FLOAT_KERNELS:
                found.append(Kernel(node.name, node.op_type, "f32"))
        return found

    def deactivate(self) -> None:
        self.session = None
        if getattr(self, "folder", None) is not None:
            self.folder.cleanup()
            self.folder = None  # type: ignore[assignment]
