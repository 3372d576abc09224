"""`deployed-NAME:RESULTS#ID` for every registered runtime (`deployed:RESULTS#ID`: onnxruntime):
one individual of a result in the form the runtime reads (the QDQ ONNX file `model-explorer
export` writes, or its quantizers as PyTorch's quantize/dequantize operators for a runtime that
converts PyTorch), so that compare sets what a runtime computes beside the fake-quantized
individual (`quantized:RESULTS#ID`) and the float model."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    logits,
)
from model_explorer.analysis.compare.environments.runtime import made
from model_explorer.deployment.runtimes import RUNTIMES, Runtime, RuntimeUnavailable, as_input
from model_explorer.errors import UserError

FORM = {"onnx": "QDQ ONNX", "pytorch": "quantize/dequantize operators"}


class DeployedEnvironment(Environment):
    """The individual deployed to `runtime` (its default setting) on the CPU."""

    def __init__(self, name: str, context: Any, reference: str, runtime: type[Runtime]) -> None:
        super().__init__(name)
        from model_explorer.operations.reevaluate import check_same_model
        from model_explorer.results import load_individual

        where = f"--env {name}"
        if context is None:
            raise UserError(f"{where}: a deployed environment needs the workload of the result")
        self.result, self.individual = load_individual(reference, where)
        check_same_model(context.workload, self.result)
        self.context, self.runtime_class, self.where = context, runtime, where
        self.description = (
            f"{self.result.problem['name']} individual {self.individual.id}, "
            f"{FORM[runtime.reads]} in {runtime.name}"
        )
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self.runtime: Runtime | None = None
        self._stand_in: Any = None
        self._prepared: tuple[nn.Module, Tensor] | None = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        from model_explorer.operations.deploy import Chosen, deploy

        self._prepared = (model, example)
        self.runtime = made(self.runtime_class, "default")
        self.folder = tempfile.TemporaryDirectory(prefix="model_explorer_deployed_")
        chosen = Chosen(self.context, self.result, self.individual, example, self.where)
        try:
            deploy(self.runtime, chosen, Path(self.folder.name))
        except RuntimeUnavailable as error:
            raise EnvironmentSkipped(str(error)) from None

    def run(self, inputs: Tensor) -> Tensor:
        assert self.runtime is not None
        return logits(torch.from_numpy(self.runtime.run(as_input(inputs))), self.name)

    def stand_in(self) -> Environment | None:
        """The fake-quantized individual the file was exported from: localisation then shows
        whether a difference is the export's or the runtime's."""
        from model_explorer.analysis.compare.environments.quantized import QuantizedEnvironment

        if self._stand_in is None and self._prepared is not None:
            name = re.sub(r"^[\w-]+", "quantized", self.name)  # deployed#5 -> quantized#5
            environment = QuantizedEnvironment(
                name, self.context, self.result, self.individual, self.where
            )
            environment.prepare(*self._prepared)
            self._stand_in = environment
        return self._stand_in

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.deactivate()
            self.runtime = None
        if self._stand_in is not None:
            self._stand_in.close()
            self._stand_in = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


def register_deployed_environments() -> None:
    """`deployed-NAME:RESULTS#ID` for every registered runtime not yet among the environments
    (runs at import; again after a runtime registered later); `deployed:` for onnxruntime."""
    for entry in RUNTIMES.entries():
        if ENVIRONMENTS.namespace(f"deployed-{entry.name}:x") is not None:
            continue
        for prefix in ["deployed"] * (entry.name == "onnxruntime") + [f"deployed-{entry.name}"]:
            ENVIRONMENTS.register_namespace(prefix, placeholder="RESULTS#ID")(
                lambda reference, name, context=None, runtime=entry.builder: DeployedEnvironment(
                    name, context, reference, runtime
                )
            )


register_deployed_environments()
