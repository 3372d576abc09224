"""The inspectors and the order taken from Hailo's diagnostic tool (Activation, PreQuantAlgo,
PostQuantAlgo; priorities and the debug log), each on a model or workload built to trigger it
and on one that must not. Expected values come from the models' structure and the digits
split sizes counted here, and from Hailo's sources (its thresholds and its default order)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from conftest import write_workload
from model_explorer.analysis.diagnose import (
    DEFAULT_ORDER,
    DiagnosisContext,
    diagnose,
    run_inspectors,
)
from model_explorer.context import WorkloadContext
from model_explorer.datasets.digits import digits_tensors
from model_explorer.workload import Workload


def _context(data: dict, tmp_path: Path, name: str = "w") -> DiagnosisContext:
    path = write_workload(data, tmp_path / f"{name}.yaml")
    return DiagnosisContext(WorkloadContext(Workload.load(path), device="cpu"), tmp_path / "out")


@pytest.fixture
def digits(trained_digits) -> dict:  # noqa: ANN001
    """The default workload on the digits checkpoint trained for the session."""
    import yaml

    workload_file, _ = trained_digits
    return copy.deepcopy(yaml.safe_load(Path(workload_file).read_text()))


class Swish(nn.Module):
    def __init__(self, beta: float) -> None:
        super().__init__()
        self.beta = beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


def _net(activation: nn.Module) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), activation, nn.Conv2d(4, 4, 3), nn.ReLU()
    ).eval()


@pytest.mark.parametrize(
    ("activation", "expected"),
    [
        (nn.SiLU(), [("warning", "SiLU")]),
        (Swish(1.702), [("warning", "beta 1.702")]),
        (Swish(1.0), []),  # SiLU written out: beta 1, nothing Hailo cannot run
        (nn.GELU(), [("info", "gelu")]),
        (nn.ReLU(), []),
    ],
)
def test_activations_that_quantize_badly(
    digits: dict, tmp_path: Path, activation: nn.Module, expected: list
) -> None:
    context = _context(digits, tmp_path)
    context.__dict__["float_model"] = _net(activation)  # the cached model, replaced
    found = run_inspectors(context, ["Activation"])
    assert [f.severity for f in found] == [severity for severity, _ in expected]
    assert all(words in f.message for f, (_, words) in zip(found, expected, strict=True))
    if isinstance(activation, Swish) and expected:
        assert found[0].evidence["beta"] == pytest.approx(1.702)
        assert found[0].layer == "1"


def test_calibration_set_size_against_hailos_default(digits: dict, tmp_path: Path) -> None:
    calibrate = digits["workload"]["calibration"]["datasets"]["calibrate"]
    calibrate["sample_limit"] = 32
    found = run_inspectors(_context(digits, tmp_path, "few"), ["PreQuantAlgo"])
    [few] = [f for f in found if "Hailo's default" in f.message]
    assert few.severity == "warning" and few.evidence["samples"] == 32
    assert few.evidence["available"] == len(digits_tensors("train")[0])
    assert few.recommendation == {"calibration": {"datasets": {"calibrate": {"sample_limit": 64}}}}
    calibrate["sample_limit"] = 128
    found = run_inspectors(_context(digits, tmp_path, "enough"), ["PreQuantAlgo"])
    [enough] = [f for f in found if "Hailo's default" in f.message]
    assert enough.severity == "info"


def test_a_percentile_the_calibration_set_cannot_reach(digits: dict, tmp_path: Path) -> None:
    """99.999% needs 100,000 values; at 64 samples the digits model's input quantizers see
    64 x (values per sample) of them, counted from its layers, every one fewer. The train
    split (1077 samples) cannot reach it for the first convolution (64 values per sample):
    the advice is max."""
    body = digits["workload"]
    body["calibration"].update(method="percentile", percentile=99.999)
    body["calibration"]["datasets"]["calibrate"]["sample_limit"] = 64
    context = _context(digits, tmp_path)
    found = run_inspectors(context, ["PreQuantAlgo"])
    [short] = [f for f in found if "percentile needs" in f.message]
    model = context.quantized_model
    per_sample = {}

    def count(name: str):  # noqa: ANN202
        def hook(module: nn.Module, args: tuple) -> None:
            per_sample.setdefault(name, args[0][0].numel())

        return hook

    handles = [layer.register_forward_pre_hook(count(n)) for n, layer in model.layers.items()]
    with torch.no_grad():
        model(context.inputs[0])
    for handle in handles:
        handle.remove()
    expected = {f"{n}.input_quantizer": 64 * v for n, v in per_sample.items() if 64 * v < 100000}
    assert short.evidence == {"values": expected, "needed": 100000}
    assert math.ceil(100000 / min(per_sample.values())) > len(digits_tensors("train")[0])
    assert short.recommendation == {"calibration": {"method": "max"}}


def test_fine_tuning_on_fewer_samples_than_hailo_asks(digits: dict, tmp_path: Path) -> None:
    train = digits["workload"]["retraining"]["datasets"]["train"]
    train["sample_limit"] = 256
    [small] = run_inspectors(_context(digits, tmp_path, "small"), ["PostQuantAlgo"])
    assert small.severity == "warning" and small.evidence["samples"] == 256
    assert len(digits_tensors("train")[0]) >= 1024  # so the recommendation can be followed
    assert small.recommendation == {"retraining": {"datasets": {"train": {"sample_limit": 1024}}}}
    train.update(split="validation", sample_limit=None)  # 360 digits: nothing more to take
    [short] = run_inspectors(_context(digits, tmp_path, "short"), ["PostQuantAlgo"])
    assert short.evidence["samples"] == len(digits_tensors("validation")[0])
    assert short.severity == "warning" and short.recommendation is None
    del digits["workload"]["retraining"]
    [none] = run_inspectors(_context(digits, tmp_path, "none"), ["PostQuantAlgo"])
    assert none.severity == "info" and "no post-quantization" in none.message


def test_the_default_order_is_hailos_by_priority() -> None:
    hailo = [
        "BatchNorm",
        "Norm",
        "Compression",
        "ConcatenatedOutputs",
        "HighPrecision",
        "Activation",
        "Clipping",
        "Image",
        "PostQuantAlgo",
        "PreQuantAlgo",
    ]
    assert list(DEFAULT_ORDER) == [*hailo, "Sensitivity"]


def test_the_debug_log_beside_the_log(digits: dict, tmp_path: Path) -> None:
    path = write_workload(digits, tmp_path / "w.yaml")
    workload = Workload.load(path)
    diagnose(workload, ["Clipping"], tmp_path / "out", echo=lambda line: None)
    debug = (tmp_path / "out" / ".debug.diagnostic.log").read_text()
    assert "Module: Clipping" in debug and "Inspector module has finished (Clipping)" in debug
    assert "DEBUG model_explorer.analysis.diagnose.inspectors.clipping: Clipping 0.input" in debug
    diagnose(workload, ["Clipping"], tmp_path / "quiet", echo=lambda line: None, debug=False)
    assert not (tmp_path / "quiet" / ".debug.diagnostic.log").exists()
