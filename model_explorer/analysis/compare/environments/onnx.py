"""The `onnxruntime` environment: the model exported to ONNX and run by onnxruntime."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    Environment,
    EnvironmentSkipped,
    logits,
    register_environment,
)


class OnnxRuntimeEnvironment(Environment):
    """The model exported to ONNX (opset 13, batch norms folded) and run by onnxruntime's CPU
    execution provider. Its intermediates come from a second export with every module's output
    marked (environments/taps.py), run by onnxruntime too."""

    description = "ONNX export run by onnxruntime (CPUExecutionProvider), float32"
    exposes_intermediates = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.session: Any = None
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self._source: tuple[nn.Module, Tensor] | None = None
        self._tapped: tuple[Any, list[tuple[str, str]]] | None = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        try:
            import onnx  # noqa: F401 - the exporter needs it
            import onnxruntime
        except ImportError:
            raise EnvironmentSkipped(
                "onnx and onnxruntime are needed and not installed; install the onnx extra: "
                "pip install 'model_explorer[onnx]'"
            ) from None
        from model_explorer.onnx_export import INPUT_NAME, export_onnx

        self._source = (model, example)
        self.folder = tempfile.TemporaryDirectory(prefix="model_explorer_onnx_")
        path = export_onnx(model, example, Path(self.folder.name) / "model.onnx", True)
        self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.input_name = INPUT_NAME

    def run(self, inputs: Tensor) -> Tensor:
        array = inputs.detach().to("cpu", torch.float32).numpy()
        output = self.session.run(None, {self.input_name: array})[0]
        return logits(torch.from_numpy(output), self.name)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        """Every module's output as onnxruntime computes it, by the tracer's names."""
        import onnxruntime

        from model_explorer.analysis.compare.environments.taps import tapped_export

        if self._tapped is None:
            model, example = self._source  # type: ignore[misc]
            path = Path(self.folder.name) / "tapped.onnx"  # type: ignore[union-attr]
            names = tapped_export(model, example, path, self.input_name)
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            self._tapped = (session, names)
        session, names = self._tapped
        array = inputs.detach().to("cpu", torch.float32).numpy()
        values = session.run([output for output, _ in names], {self.input_name: array})
        return {
            name: torch.from_numpy(value).to(torch.float64)
            for (_, name), value in zip(names, values, strict=True)
        }

    def close(self) -> None:
        self.session = None
        self._tapped = None
        self._source = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


register_environment("onnxruntime")(lambda name, context: OnnxRuntimeEnvironment(name))
