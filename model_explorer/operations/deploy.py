"""An individual activated in a runtime, in the form the runtime reads (its `reads`): the QDQ
ONNX file `model-explorer export` writes, or the PyTorch model with its quantizers as PyTorch's
quantize/dequantize operators (litert.py), which a converter from PyTorch takes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from torch import Tensor

from model_explorer.deployment.quantized_decomposed import litert_quantizers
from model_explorer.deployment.runtimes import Runtime
from model_explorer.operations.deployment_check import export_individual
from model_explorer.operations.rebuild import calibrated_individual

if TYPE_CHECKING:
    from model_explorer.results import ExplorationResult, Individual
    from model_explorer.workload.context import WorkloadContext


@dataclass
class Chosen:
    """An individual of a result, with the workload it was searched on, an example batch of
    its inputs and where to name it in errors."""

    context: WorkloadContext
    result: ExplorationResult
    individual: Individual
    example: Tensor
    where: str

    def qdq_file(self, runtime: Runtime, folder: Path) -> None:
        path = folder / "model.onnx"
        export_individual(self.context, self.result, self.individual, path, where=self.where)
        runtime.activate(path)

    def qdq_operators(self, runtime: Runtime, folder: Path) -> None:
        quantized = calibrated_individual(self.context, self.result, self.individual, self.where)
        quantized.eval()
        with litert_quantizers(quantized, self.example[:1]):
            runtime.activate_model(quantized, self.example[:1], folder)


# what a runtime reads -> how an individual reaches it
FORMS = {"onnx": Chosen.qdq_file, "pytorch": Chosen.qdq_operators}


def deploy(runtime: Runtime, chosen: Chosen, folder: Path) -> None:
    """Activate `runtime` on the chosen individual in the form it reads; its files go to
    `folder`."""
    FORMS[runtime.reads](chosen, runtime, folder)
