"""The `openvino` environment: the model converted by OpenVINO's PyTorch frontend
(`openvino.convert_model`) and compiled for the CPU."""

from __future__ import annotations

import tempfile
import warnings
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


class OpenVinoEnvironment(Environment):
    """The model converted from PyTorch by OpenVINO (its TorchScript-based frontend, traced on the
    example batch with a free batch axis) and compiled for OpenVINO's CPU plugin in float32
    (its default on CPUs with bf16 would run in bf16: `precision: bf16` is another
    environment's question)."""

    description = "OpenVINO (convert_model from PyTorch), CPU plugin, float32"
    exposes_intermediates = True

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.compiled: Any = None
        self._source: tuple[nn.Module, Tensor] | None = None
        self._tapped: tuple[Any, list[tuple[str, str]]] | None = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        try:
            import openvino
            import openvino.properties.hint as hints
        except ImportError:
            raise EnvironmentSkipped(
                "openvino is not installed; install the openvino extra: "
                "pip install 'model_explorer[openvino]'"
            ) from None
        self._source = (model, example)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = openvino.convert_model(model.eval(), example_input=example[:1])
        self.compiled = openvino.Core().compile_model(
            converted, "CPU", {hints.inference_precision: openvino.Type.f32}
        )

    def run(self, inputs: Tensor) -> Tensor:
        output = self.compiled(inputs.detach().to("cpu", torch.float32).numpy())[0]
        return logits(torch.from_numpy(output), self.name)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        """Every module's output as OpenVINO computes it, by the tracer's names: OpenVINO runs
        the export with every module's output marked (environments/taps.py; its ONNX frontend,
        since the marks are ONNX graph outputs)."""
        import openvino
        import openvino.properties.hint as hints

        from model_explorer.analysis.compare.environments.taps import tapped_export

        if self._tapped is None:
            model, example = self._source  # type: ignore[misc]
            self._folder = tempfile.TemporaryDirectory(prefix="model_explorer_openvino_")
            path = Path(self._folder.name) / "tapped.onnx"
            names = tapped_export(model, example, path)
            compiled = openvino.Core().compile_model(
                str(path), "CPU", {hints.inference_precision: openvino.Type.f32}
            )
            self._tapped = (compiled, names)
        compiled, names = self._tapped
        results = compiled(inputs.detach().to("cpu", torch.float32).numpy())
        return {
            name: torch.from_numpy(results[compiled.output(output)]).to(torch.float64)
            for output, name in names
        }

    def close(self) -> None:
        self.compiled = None
        self._tapped = None
        self._source = None
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


register_environment("openvino")(lambda name, context: OpenVinoEnvironment(name))
