"""The `openvino` environment: the model converted by OpenVINO's PyTorch frontend
(`openvino.convert_model`) and compiled for the CPU."""

from __future__ import annotations

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
        self.tapped: Any = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        try:
            import openvino
        except ImportError:
            raise EnvironmentSkipped(
                "openvino is not installed; install the openvino extra: "
                "pip install 'model_explorer[openvino]'"
            ) from None
        from model_explorer.analysis.compare.environments.taps import TappedModel
        from model_explorer.deployment.runtimes import openvino_cpu

        self.tapped = TappedModel(model, example, _all_outputs)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = openvino.convert_model(model.eval(), example_input=example[:1])
        self.compiled = openvino_cpu(converted)

    def run(self, inputs: Tensor) -> Tensor:
        output = self.compiled(inputs.detach().to("cpu", torch.float32).numpy())[0]
        return logits(torch.from_numpy(output), self.name)

    def intermediates(self, inputs: Tensor) -> dict[str, Tensor] | None:
        """Every module's output as OpenVINO computes it, by the tracer's names: OpenVINO runs
        the export with every module's output marked (environments/taps.py; its ONNX frontend,
        since the marks are ONNX graph outputs)."""
        return self.tapped.intermediates(inputs)  # type: ignore[union-attr]

    def close(self) -> None:
        self.compiled = None
        if self.tapped is not None:
            self.tapped.close()
            self.tapped = None


def _all_outputs(path: Path) -> Any:
    """OpenVINO's run of the file at `path`: a batch to every graph output by name."""
    from model_explorer.deployment.runtimes import openvino_cpu

    compiled = openvino_cpu(str(path))
    return lambda array: {
        name: value for port, value in compiled(array).items() for name in port.get_names()
    }


register_environment("openvino")(lambda name, context: OpenVinoEnvironment(name))
