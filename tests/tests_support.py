"""Shared helpers of the tests: a cheap synthetic Problem, small models, a user inspector, the
calibrated digits model, results compared without their wall-clock times."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from model_explorer.analysis.diagnose import BaseInspector
from model_explorer.problems import Constraint, Evaluation, Objective, Problem, Variable
from model_explorer.results import ExplorationResult


class Synthetic(Problem):
    """Bits per gene; 'accuracy' falls with fewer bits, faster for early genes."""

    name = "synthetic"

    def __init__(self, genes: int = 6, minimum: float = 0.6, fail_after: int | None = None) -> None:
        self.variables = [Variable(f"g{i}", 2, 8) for i in range(genes)]
        self.objectives = [Objective("accuracy", maximize=True), Objective("bits")]
        self.constraints = [Constraint("accuracy", minimum=minimum)]
        self.calls: Counter[tuple] = Counter()
        self.fail_after = fail_after

    def apply(self, configuration):
        pass

    def measure(self, configuration):
        if self.fail_after is not None and sum(self.calls.values()) >= self.fail_after:
            raise KeyboardInterrupt
        self.calls[tuple(configuration)] += 1
        weights = np.linspace(2.0, 0.5, len(configuration))
        loss = float(np.sum(weights * (8 - np.array(configuration)) ** 2)) / 200.0
        finite = configuration[0] > 3  # a planted "NaN model" at the lowest widths
        return Evaluation(
            {"accuracy": max(0.0, 1.0 - loss), "bits": float(sum(configuration))},
            [1.0 - loss],
            finite=finite,
        )


# -- small models for the diagnostics tests (loaded by `tests_support:<name>` model types) -----


class ChannelScale(nn.Module):
    """Multiplies each channel by a stored factor (ones: the identity)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale.view(1, -1, *([1] * (x.dim() - 2)))


def plain_cnn(num_classes: int = 10) -> nn.Module:
    """Two convolutions without batch norm and a linear layer, for 8x8 digits. The
    ChannelScale after the second convolution lets a test scale one of its channels up in the
    weights and back down afterwards without changing the function."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        ChannelScale(16),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 16, num_classes),
    )


class Standardize(nn.Module):
    """(x - mean) / std with the statistics as buffers (a normalization inside a model, as
    torchvision's Normalize transform would be)."""

    def __init__(self, mean: float = 0.0, std: float = 1.0) -> None:
        super().__init__()
        self.register_buffer("mean", torch.full((1, 1, 1, 1), mean))
        self.register_buffer("std", torch.full((1, 1, 1, 1), std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def normalizing_cnn(num_classes: int = 10) -> nn.Module:
    """plain_cnn after a Standardize of its input: a model that normalizes inside."""
    return nn.Sequential(Standardize(), plain_cnn(num_classes))


class TwoBranches(nn.Module):
    """Two convolutions of the input concatenated along channels, then a linear head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.a = nn.Conv2d(1, 4, 3, padding=1)
        self.b = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(8 * 64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.a(x), self.b(x)], dim=1).flatten(1))


def two_branches(num_classes: int = 10) -> nn.Module:
    return TwoBranches(num_classes)


class ConcatenatedHeads(nn.Module):
    """Two linear heads of the flattened input, their outputs concatenated as the model's
    output (half the classes each)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.a = nn.Linear(64, num_classes // 2)
        self.b = nn.Linear(64, num_classes - num_classes // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten(1)
        return torch.cat([self.a(flat), self.b(flat)], dim=1)


def concatenated_heads(num_classes: int = 10) -> nn.Module:
    return ConcatenatedHeads(num_classes)


class AlwaysWarns(BaseInspector):
    """A user inspector loaded by import path."""

    name = "AlwaysWarns"

    def run(self, context):
        return [self.finding("warning", "planted", layer="everywhere")]


class Explodes(BaseInspector):
    """A user inspector that fails."""

    name = "Explodes"

    def run(self, context):
        raise RuntimeError("planted failure")


def without_times(result: ExplorationResult | str | os.PathLike[str]) -> dict:
    """A result's data (or a result file's) without wall-clock times, which differ between runs
    by nature, nor the folder its workload's relative paths start from (`root`, stored
    absolute), which differs between runs in two folders."""
    if not isinstance(result, ExplorationResult):
        result = ExplorationResult.load(result)
    data = result.to_data()
    stored = data.get("workload", {}).get("workload")
    if isinstance(stored, dict):
        stored.pop("root", None)
    data["individuals"] = [
        {k: v for k, v in r.items() if k != "seconds"} for r in data["individuals"]
    ]
    data["stats"] = {k: v for k, v in data["stats"].items() if k != "seconds"}
    return data


def digits_workload_file(trained_digits: tuple[Path, Path], folder: Path) -> Path:
    """The default workload written to `folder` with the session's trained checkpoint and its
    calibration file in `folder` (not made yet)."""
    import yaml

    workload_file, checkpoint = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(folder / "calibration.pt")
    path = folder / "digits.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def calibrated_digits(trained_digits: tuple[Path, Path], folder: Path) -> tuple[Any, Any]:
    """(context, calibrated QuantizedModel) of the default workload with the session's trained
    checkpoint, its calibration file in `folder`, exploration batches of 40."""
    import yaml

    from model_explorer.operations.pipeline import calibrate_workload
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    workload_file, checkpoint = trained_digits
    data = yaml.safe_load(workload_file.read_text())
    data["workload"]["model"]["weights"] = str(checkpoint)
    data["workload"]["calibration"]["file"] = str(folder / "c.pt")
    data["workload"]["exploration"]["datasets"]["exploration"]["batch_size"] = 40
    context = WorkloadContext(Workload.from_dict(data), device="cpu")
    model, _, _ = calibrate_workload(context)
    return context, model


def localise_perturbed(spec: str, layer: str, samples: int) -> dict:
    """compare's localisation of eager against the environment `spec` names, run on digits_cnn
    with `layer`'s weight shifted by half its standard deviation inside that environment only:
    the planted fault whose layer a runtime's own intermediates must name."""
    from model_explorer.analysis.compare import compare, environment
    from model_explorer.models import create_model

    perturbed = environment(spec)
    perturbed.name = "perturbed"
    prepare = perturbed.prepare

    def perturb_then_prepare(model: nn.Module, example: torch.Tensor) -> None:
        weight = model.get_submodule(layer).weight
        with torch.no_grad():
            weight += 0.5 * weight.std()
        prepare(model, example)

    perturbed.prepare = perturb_then_prepare  # type: ignore[method-assign]
    torch.manual_seed(0)
    model = create_model("digits_cnn").eval()
    comparison = compare(model, torch.randn(samples, 1, 8, 8), ["eager", perturbed])
    return comparison.localisations[("eager", "perturbed")]


def runtime_intermediates(
    spec: str, model: nn.Module, inputs: torch.Tensor
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Every module's output as the environment `spec` computes it on `inputs` (prepared on
    the first sample), and every operator's output as eager computes it: what a runtime's
    intermediates are checked against."""
    from model_explorer.analysis.compare.environments import environment, operator_outputs

    env = environment(spec)
    env.prepare(model, inputs[:1])
    try:
        found = env.intermediates(inputs)
    finally:
        env.close()
    return found, operator_outputs(model, inputs)


def notebook_project(folder: Path) -> Path:
    """A project as a user has one after `make run`: `evaluation_scripts/` and `results/`."""
    project = folder / "project"
    (project / "evaluation_scripts").mkdir(parents=True)
    (project / "results").mkdir()
    return project


def run_in_project(notebook: Any, project: Path) -> str:
    """Execute `notebook` as a user runs it (the kernel started in the project's
    evaluation_scripts/); its cells' outputs as JSON text, which must hold no error."""
    import json

    from nbclient import NotebookClient

    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(project / "evaluation_scripts")}},
    )
    client.execute()
    text = json.dumps([cell.get("outputs", []) for cell in notebook.cells])
    assert "Error" not in text and "Traceback" not in text
    return text
