"""`deployed:RESULTS#ID`, `deployed-openvino:RESULTS#ID` and `deployed-tvm:RESULTS#ID`: one
individual of a result exported as a QDQ ONNX file (as `model-explorer export` writes it) and run
by onnxruntime, OpenVINO or Apache TVM, so that compare sets what a runtime computes beside the
fake-quantized individual (`quantized:RESULTS#ID`) and the float model."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from model_explorer.analysis.compare.environments.base import (
    ENVIRONMENTS,
    Environment,
    EnvironmentSkipped,
    logits,
)
from model_explorer.errors import UserError


class DeployedEnvironment(Environment):
    """The individual exported to a temporary QDQ file, run by `runtime` on the CPU."""

    def __init__(self, name: str, context: Any, reference: str, runtime: str) -> None:
        super().__init__(name)
        from model_explorer.exploration.reevaluate import check_same_model
        from model_explorer.results import load_individual

        where = f"--env {name}"
        if context is None:
            raise UserError(f"{where}: a deployed environment needs the workload of the result")
        self.result, self.individual = load_individual(reference, where)
        check_same_model(context.workload, self.result)
        self.context, self.runtime, self.where = context, runtime, where
        self.description = (
            f"{self.result.problem['name']} individual {self.individual.id}, QDQ ONNX in {runtime}"
        )
        self.folder: tempfile.TemporaryDirectory[str] | None = None
        self.module: Any = None
        self.reference = reference
        self._stand_in: Any = None
        self._prepared: tuple[nn.Module, Tensor] | None = None

    def prepare(self, model: nn.Module, example: Tensor) -> None:
        from model_explorer.deployment.check import RuntimeModule, export_individual
        from model_explorer.deployment.runtimes import open_session

        self._prepared = (model, example)
        self.folder = tempfile.TemporaryDirectory(prefix="model_explorer_deployed_")
        path = Path(self.folder.name) / "model.onnx"
        try:
            export_individual(self.context, self.result, self.individual, path, where=self.where)
            self.module = RuntimeModule(open_session(self.runtime, path, self.where))
        except UserError as error:
            if "not installed" in str(error):
                raise EnvironmentSkipped(str(error)) from None
            raise

    def run(self, inputs: Tensor) -> Tensor:
        return logits(self.module(inputs), self.name)

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
        self.module = None
        if self._stand_in is not None:
            self._stand_in.close()
            self._stand_in = None
        if self.folder is not None:
            self.folder.cleanup()
            self.folder = None


@ENVIRONMENTS.register_namespace("deployed", placeholder="RESULTS#ID")
def deployed_environment(reference: str, name: str, context: Any = None) -> Environment:
    return DeployedEnvironment(name, context, reference, "onnxruntime")


@ENVIRONMENTS.register_namespace("deployed-openvino", placeholder="RESULTS#ID")
def deployed_openvino_environment(reference: str, name: str, context: Any = None) -> Environment:
    return DeployedEnvironment(name, context, reference, "openvino")


@ENVIRONMENTS.register_namespace("deployed-tvm", placeholder="RESULTS#ID")
def deployed_tvm_environment(reference: str, name: str, context: Any = None) -> Environment:
    return DeployedEnvironment(name, context, reference, "tvm")
