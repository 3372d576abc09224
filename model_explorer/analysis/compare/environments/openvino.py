"""The `openvino` environment: the model converted by OpenVINO's PyTorch frontend
(`openvino.convert_model`) and compiled for the CPU."""

from __future__ import annotations

import warnings
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

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.compiled: Any = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        try:
            import openvino
            import openvino.properties.hint as hints
        except ImportError:
            raise EnvironmentSkipped(
                "openvino is not installed; install the openvino extra: "
                "pip install 'model_explorer[openvino]'"
            ) from None
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = openvino.convert_model(model.eval(), example_input=example[:1])
        self.compiled = openvino.Core().compile_model(
            converted, "CPU", {hints.inference_precision: openvino.Type.f32}
        )

    def run(self, inputs: Tensor) -> Tensor:
        output = self.compiled(inputs.detach().to("cpu", torch.float32).numpy())[0]
        return logits(torch.from_numpy(output), self.name)

    def close(self) -> None:
        self.compiled = None


register_environment("openvino")(lambda name, context: OpenVinoEnvironment(name))
