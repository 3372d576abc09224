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
        self.tapped: Any = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        try:
            import onnx  # noqa: F401 - the exporter needs it
            import onnxruntime
        except ImportError:
            raise EnvironmentSkipped(
                "onnx and onnxruntime are needed and not installed; install the onnx extra: "
                "pip install 'model_explorer[onnx]'"
            ) from None
        from model_explorer.analysis.compare.environments.taps import TappedModel
        from model_explorer.onnx_export import INPUT_NAME, export_onnx

        self.tapped = TappedModel(model, example, _all_outputs)
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
        return self.tapped.intermediates(inputs)  # type: ignore[union-attr]

    def close(self) -> None:
        self.session = None
        if self.tapped is not None:
            self.tapped.close()
            self.tapped = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


def _all_outputs(path: Path) -> Any:
    """onnxruntime's run of the file at `path`: a batch to every graph output by name."""
    import onnxruntime

    from model_explorer.onnx_export import INPUT_NAME

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return lambda array: dict(zip(names, session.run(names, {INPUT_NAME: array}), strict=True))


register_environment("onnxruntime")(lambda name, context: OnnxRuntimeEnvironment(name))
