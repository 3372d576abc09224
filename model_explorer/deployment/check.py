"""Does a configuration hold where it is deployed? An individual of a result exported in QDQ
form and run by each runtime on the data the search scored it on, beside the fake-quantized
model and the accuracy the result recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from model_explorer.deployment.export import ExportSummary, export_qdq
from model_explorer.deployment.runtimes import Session, describe_kernels, open_session
from model_explorer.errors import UserError
from model_explorer.fileio import read_torch_file

if TYPE_CHECKING:
    from model_explorer.context import WorkloadContext
    from model_explorer.results import ExplorationResult, Individual

# The search scores individuals on this role; the check scores the runtimes on the same data.
ROLE = "exploration"


@dataclass
class RuntimeScore:
    """One runtime's accuracy, its agreement with the fake-quantized model (the share of
    samples with the same predicted class) and which layers it ran on integers."""

    runtime: str
    accuracy: float
    agreement: float
    integer_layers: list[str] = field(default_factory=list)
    float_layers: list[str] = field(default_factory=list)


@dataclass
class DeploymentCheck:
    individual: int
    recorded: float | None
    fake_quant: float
    export: ExportSummary
    runtimes: list[RuntimeScore]

    def row(self) -> dict[str, Any]:
        """One flat row: the individual, its accuracies and, per runtime, accuracy, agreement
        and the number of layers run on integers."""
        row: dict[str, Any] = {
            "id": self.individual,
            "recorded_accuracy": self.recorded,
            "fake_quant_accuracy": self.fake_quant,
            "file_bytes": self.export.size,
        }
        for score in self.runtimes:
            row[f"{score.runtime}_accuracy"] = score.accuracy
            row[f"{score.runtime}_agreement"] = score.agreement
            row[f"{score.runtime}_integer_layers"] = len(score.integer_layers)
        return row


class Recorded(nn.Module):
    """Runs `forward` and keeps each batch's predicted classes (argmax of the last axis)."""

    def __init__(self, run: Any) -> None:
        super().__init__()
        self.run = run
        self.classes: list[Tensor] = []

    def forward(self, x: Tensor) -> Tensor:
        output = self.run(x)
        self.classes.append(output.detach().argmax(-1).cpu())
        return output


class RuntimeModule(nn.Module):
    """A runtime session as a module: batches in (floats as float32, token ids as they are),
    its output as a tensor out."""

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session

    def forward(self, x: Tensor) -> Tensor:
        inputs = x.detach().cpu()
        if inputs.is_floating_point():
            inputs = inputs.float()
        output = self.session.run(inputs.numpy())
        return torch.from_numpy(output).to(x.device)


def require_calibration(context: WorkloadContext, model: nn.Module) -> None:
    """The calibration file must exist and hold a calibration of these weights: an export
    writes its scales, so a stale file would deploy what the search never scored."""
    from model_explorer.quantization.pipeline import calibration_file, weights_fingerprint

    path = calibration_file(context)
    if not path.exists():
        raise UserError(
            f"workload.calibration.file: '{path}' does not exist; the export needs the "
            "calibration the search used (run model-explorer calibrate)"
        )
    stored = read_torch_file(path, "workload.calibration.file", "calibration file")
    weights = stored.get("weights") if isinstance(stored, dict) else None
    if weights is not None and weights != weights_fingerprint(model):
        raise UserError(
            f"workload.calibration.file: '{path}' was made for other weights than "
            f"{context.workload.model.weights}; recalibrate or point the workload at the "
            "calibration the search used"
        )


def calibrated_individual(
    context: WorkloadContext, result: ExplorationResult, individual: Individual, where: str
) -> nn.Module:
    """The individual's QuantizedModel with its plan in effect, once its calibration file is
    known to be the one the search used: what every runtime's form of it starts from."""
    from model_explorer.problems.rebuild import individual_problem

    model = individual_problem(context, result, individual, where).model
    require_calibration(context, model.model)
    return model


def export_individual(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    path: str | Path,
    pack: bool = True,
    where: str = "RESULTS",
) -> tuple[nn.Module, ExportSummary]:
    """The individual's model (its plan in effect) and its QDQ export at `path`."""
    model = calibrated_individual(context, result, individual, where)
    inputs = next(iter(context.batches(ROLE)))[0]
    example = (inputs[:1] if isinstance(inputs, Tensor) else inputs).to(context.device)
    return model, export_qdq(model, example, path, pack)


def check_individual(
    context: WorkloadContext,
    result: ExplorationResult,
    individual: Individual,
    runtimes: list[str],
    path: str | Path,
    pack: bool = True,
) -> DeploymentCheck:
    """Export the individual to `path`, run it with each runtime on the exploration data and
    score it beside the fake-quantized model."""
    model, summary = export_individual(context, result, individual, path, pack)
    reference = Recorded(model)
    fake_quant = float(context.evaluate(reference, ROLE))  # type: ignore[arg-type]
    expected = torch.cat(reference.classes)
    scores = []
    for runtime in runtimes:
        session = open_session(runtime, Path(path))
        recorded = Recorded(RuntimeModule(session))
        accuracy = float(context.evaluate(recorded, ROLE))  # type: ignore[arg-type]
        agreement = (torch.cat(recorded.classes) == expected).float().mean().item()
        kernels = describe_kernels(session.kernels(), getattr(model, "layers", {}))
        scores.append(
            RuntimeScore(runtime, accuracy, agreement, kernels["integer"], kernels["float"])
        )
    recorded_accuracy = individual.values.get("accuracy")
    return DeploymentCheck(individual.id, recorded_accuracy, fake_quant, summary, scores)
