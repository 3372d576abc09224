"""The inspectors and the order taken from Hailo's diagnostic tool (Activation, PreQuantAlgo,
PostQuantAlgo; priorities and the debug log), each on a model or workload built to trigger it
and on one that must not. Expected values come from the models' own structure, values counted
by hand (plain_cnn on 8x8 digits: its layers 0, 2 and 7 read 1x8x8 = 64, 16x8x8 = 1024 and
16x4x4 = 256 values per sample), the digits splits' sizes, and Hailo's sources (its
thresholds, priorities and default order)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import write_workload
from model_explorer import cli
from model_explorer.analysis.diagnose import (
    DEFAULT_ORDER,
    INSPECTORS,
    DiagnosisContext,
    diagnose,
    run_inspectors,
)
from model_explorer.analysis.diagnose.inspectors.algorithms import needed_values, values_per_sample
from model_explorer.datasets.digits import digits_tensors
from model_explorer.quantization.amax_rules import percentile_amax
from model_explorer.quantization.model import QuantizedModel
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload

TRAIN = len(digits_tensors("train")[0])  # 1077 digits
VALIDATION = len(digits_tensors("validation")[0])  # 360


@pytest.fixture
def data(default_workload_data: dict, tmp_path: Path) -> dict:
    """The default workload on plain_cnn with random weights, calibrated in memory."""
    body = default_workload_data["workload"]
    body["model"] = {"type": "tests_support:plain_cnn", "pretrained": False}
    body["calibration"]["file"] = str(tmp_path / "calibration.pt")
    return default_workload_data


def _context(data: dict, tmp_path: Path, name: str = "w") -> DiagnosisContext:
    path = write_workload(data, tmp_path / f"{name}.yaml")
    return DiagnosisContext(WorkloadContext(Workload.load(path), device="cpu"), tmp_path / "out")


def _calibrate(data: dict, samples: int | None, **calibration: object) -> dict:
    body = data["workload"]["calibration"]
    body.update(calibration)
    body["datasets"]["calibrate"]["sample_limit"] = samples
    return data


# -- Activation -------------------------------------------------------------------------------
class Functional(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


class Swish(nn.Module):
    """x * sigmoid(beta x), written as `form` says."""

    def __init__(self, beta: float, form: str = "mul") -> None:
        super().__init__()
        self.form = form
        self.beta = nn.Parameter(torch.tensor(beta)) if form == "parameter" else beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.form == "div":
            return x * torch.sigmoid(x / (1 / self.beta))
        if self.form == "parameter":
            return torch.sigmoid(x * self.beta) * x
        if self.form == "plain":
            return x * torch.sigmoid(x)
        return x * torch.sigmoid(self.beta * x)


class Gate(nn.Module):
    """Squeeze-and-excitation style gating: x * sigmoid(f(x)), no swish."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.scale(x))


def _net(first: nn.Module, second: nn.Module | None = None) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), first, nn.Conv2d(4, 4, 3), second or nn.ReLU()
    ).eval()


def _activation(data: dict, tmp_path: Path, model: nn.Module) -> list:
    context = _context(data, tmp_path)
    context.__dict__["float_model"] = model  # the cached float model, replaced
    return run_inspectors(context, ["Activation"])


def test_silu_modules_and_calls_are_warnings(data: dict, tmp_path: Path) -> None:
    model = _net(nn.SiLU(), Functional())
    [found] = _activation(data, tmp_path, model)
    expected = [n for n, m in model.named_modules() if isinstance(m, (nn.SiLU, Functional))]
    assert expected == ["1", "3"]
    assert found.severity == "warning" and found.evidence["layers"] == expected
    assert "SiLU" in found.message and "consider retraining with ReLU" in found.message
    assert found.recommendation is None


@pytest.mark.parametrize(
    ("swish", "beta"),
    [(Swish(1.702), 1.702), (Swish(0.5, "div"), 0.5), (Swish(1.5, "parameter"), 1.5)],
    ids=["times_beta", "over_t", "parameter"],
)
def test_swish_with_beta_other_than_one(
    data: dict, tmp_path: Path, swish: Swish, beta: float
) -> None:
    [found] = _activation(data, tmp_path, _net(swish))
    assert found.severity == "warning" and "swish" in found.message
    assert "consider retraining with ReLU" in found.message
    assert found.layer == "1" and found.evidence["beta"] == pytest.approx(beta)


@pytest.mark.parametrize("swish", [Swish(1.0), Swish(1.0, "plain")], ids=["one_x", "x"])
def test_silu_written_out_is_silu(data: dict, tmp_path: Path, swish: Swish) -> None:
    [found] = _activation(data, tmp_path, _net(swish))
    assert found.severity == "warning" and "SiLU" in found.message and found.layer == "1"


@pytest.mark.parametrize(
    ("activation", "counted"),
    [
        (nn.ReLU(), {"relu": 2}),
        (nn.LeakyReLU(0.1), {"leaky_relu": 1, "relu": 1}),
        (nn.Sigmoid(), {"sigmoid": 1, "relu": 1}),
        (Gate(), {"sigmoid": 1, "relu": 1}),
        (nn.ReLU6(), {"hardtanh": 1, "relu": 1}),
    ],
    ids=["relu", "leaky_relu", "sigmoid", "gate", "relu6"],
)
def test_activations_that_quantize_well_are_counted(
    data: dict, tmp_path: Path, activation: nn.Module, counted: dict
) -> None:
    [found] = _activation(data, tmp_path, _net(activation))
    assert found.severity == "info" and found.evidence["activations"] == counted
    assert ("ReLU6" in found.message) == ("hardtanh" in counted)


@pytest.mark.parametrize(
    ("activation", "kind"),
    [(nn.GELU(), "gelu"), (nn.Mish(), "mish"), (nn.Hardswish(), "hardswish")],
)
def test_silu_like_activations_are_info(
    data: dict, tmp_path: Path, activation: nn.Module, kind: str
) -> None:
    [found] = _activation(data, tmp_path, _net(activation))
    assert found.severity == "info" and kind in found.message and found.layer == "1"
    x = torch.linspace(-3, 0, 3001)
    assert activation(x).min() < -0.1  # the negative dip the docstring names


# -- PreQuantAlgo -----------------------------------------------------------------------------
def _pre(data: dict, tmp_path: Path, name: str = "w") -> list:
    return run_inspectors(_context(data, tmp_path, name), ["PreQuantAlgo"])


def test_calibration_set_size_against_hailos_default(data: dict, tmp_path: Path) -> None:
    [few] = _pre(_calibrate(data, 32, method="max"), tmp_path, "few")
    assert few.severity == "warning" and few.evidence == {"samples": 32, "available": TRAIN}
    assert few.recommendation == {"calibration": {"datasets": {"calibrate": {"sample_limit": 64}}}}
    [enough] = _pre(_calibrate(data, 128), tmp_path, "enough")
    assert enough.severity == "info" and enough.evidence["samples"] == 128


def test_a_calibration_set_that_cannot_reach_64(data: dict, tmp_path: Path) -> None:
    x, y = digits_tensors("train")
    file = tmp_path / "forty.npz"
    np.savez(file, inputs=x[:40].numpy(), labels=y[:40].numpy())
    data["workload"]["calibration"]["datasets"]["calibrate"] = {"type": "arrays", "path": str(file)}
    [few] = _pre(_calibrate(data, None, method="max"), tmp_path)
    assert few.severity == "warning" and few.evidence == {"samples": 40, "available": 40}
    assert "holds only 40" in few.message and few.recommendation is None


def test_a_percentile_few_values_make_the_maximum(data: dict, tmp_path: Path) -> None:
    """99.99% needs 10,000 values. At 100 samples layer 0 sees 6,400 (64 each), layers 2 and 7
    102,400 and 25,600: only layer 0 is short; 157 samples give it 10,048 (156: 9,984)."""
    _calibrate(data, 100, method="percentile", percentile=99.99)
    short = [f for f in _pre(data, tmp_path, "short") if "percentile needs" in f.message]
    assert [f.evidence["values"] for f in short] == [{"0.input_quantizer": 6400}]
    limit = {"calibration": {"datasets": {"calibrate": {"sample_limit": 157}}}}
    assert short[0].severity == "warning" and short[0].recommendation == limit
    _calibrate(data, 157)
    assert not [f for f in _pre(data, tmp_path, "enough") if "percentile needs" in f.message]


@pytest.mark.parametrize(("samples", "short"), [(9, True), (10, False)])
def test_the_percentile_threshold_is_exact(
    data: dict, tmp_path: Path, samples: int, short: bool
) -> None:
    """99.84375% = 1 - 1/640: layer 0 reaches 640 values at exactly 10 samples."""
    _calibrate(data, samples, method="percentile", percentile=99.84375)
    found = [f for f in _pre(data, tmp_path) if "percentile needs" in f.message]
    assert bool(found) == short
    if short:
        assert found[0].evidence["values"] == {"0.input_quantizer": 9 * 64}


@pytest.mark.parametrize(("percentile", "needed"), [(99.9, 1000), (99.99, 10000), (99.84375, 640)])
def test_needed_values_are_where_the_calibrators_percentile_leaves_the_maximum(
    percentile: float, needed: int
) -> None:
    """The calibrator's own rule on `needed` values one per bin: amax below the top bin; one
    value fewer: the top bin's edge, the maximum."""
    assert needed_values(percentile) == needed
    assert percentile_amax(np.ones(needed), 1.0, percentile) < needed
    assert percentile_amax(np.ones(needed - 1), 1.0, percentile) == needed - 1


def test_a_percentile_the_data_cannot_reach_recommends_max(data: dict, tmp_path: Path) -> None:
    """99.999% needs 100,000 values: layer 0 would need 1,563 samples, the split holds 1,077."""
    _calibrate(data, 64, method="percentile", percentile=99.999)
    [short] = [f for f in _pre(data, tmp_path) if "percentile needs" in f.message]
    per_sample = {"0": 64, "2": 1024, "7": 256}
    assert short.evidence["values"] == {
        f"{n}.input_quantizer": 64 * v for n, v in per_sample.items()
    }
    assert math.ceil(100000 / 64) > TRAIN
    assert short.recommendation == {"calibration": {"method": "max"}}


class Shared(nn.Module):
    """One linear layer applied twice: its input quantizer reads 64 + 64 values per sample."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.head = nn.Linear(64, 64), nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.fc(torch.relu(self.fc(x.flatten(1)))))


def test_values_of_a_layer_used_twice_are_counted_twice(data: dict, tmp_path: Path) -> None:
    context = _context(data, tmp_path)
    context.__dict__["quantized_model"] = QuantizedModel(Shared().eval())
    assert values_per_sample(context) == {"fc.input_quantizer": 128, "head.input_quantizer": 64}


# -- PostQuantAlgo ----------------------------------------------------------------------------
def _post(data: dict, tmp_path: Path, name: str) -> list:
    return run_inspectors(_context(data, tmp_path, name), ["PostQuantAlgo"])


def test_fine_tuning_set_against_hailos_1024(data: dict, tmp_path: Path) -> None:
    retraining = data["workload"]["retraining"]
    train = retraining["datasets"]["train"]
    [everything] = _post(data, tmp_path, "all")  # the train split, no sample_limit
    assert everything.severity == "info" and everything.evidence["samples"] == TRAIN
    assert f"{retraining['epochs']} epochs" in everything.message
    train["sample_limit"] = 256
    [small] = _post(data, tmp_path, "small")
    assert small.severity == "warning" and small.evidence["samples"] == 256
    assert small.recommendation == {"retraining": {"datasets": {"train": {"sample_limit": 1024}}}}
    train.update(split="validation", sample_limit=100)  # 360 digits: take them all
    [some] = _post(data, tmp_path, "some")
    assert some.recommendation == {
        "retraining": {"datasets": {"train": {"sample_limit": VALIDATION}}}
    }
    train["sample_limit"] = None
    [short] = _post(data, tmp_path, "short")
    assert short.evidence["samples"] == VALIDATION
    assert short.severity == "warning" and short.recommendation is None
    del data["workload"]["retraining"]
    [none] = _post(data, tmp_path, "none")
    assert none.severity == "info" and "no post-quantization" in none.message


def test_the_recommended_workload_validates(data: dict, tmp_path: Path) -> None:
    """Both inspectors' recommendations in one file: 32 samples leave layers 0 and 7 short of
    99.99%'s 10,000 values (2,048 and 8,192); 157 samples, more than 64, win."""
    _calibrate(data, 32, method="percentile", percentile=99.99)
    data["workload"]["retraining"]["datasets"]["train"]["sample_limit"] = 256
    path = write_workload(data, tmp_path / "w.yaml")
    out = tmp_path / "recommended.yaml"
    diagnose(
        Workload.load(path),
        ["PreQuantAlgo", "PostQuantAlgo"],
        tmp_path / "out",
        output_workload=out,
        echo=lambda line: None,
    )
    recommended = Workload.load(out, check_paths=False)
    assert recommended.calibration.datasets.calibrate.sample_limit == 157
    assert recommended.retraining.datasets.train.sample_limit == 1024


# -- order and logs ---------------------------------------------------------------------------
HAILO_PRIORITIES = {  # Hailo's InspectorPriority of each inspector (HIGH 30, MEDIUM 20, LOW 10)
    "BatchNorm": 30,
    "Norm": 30,
    "Compression": 20,
    "ConcatenatedOutputs": 20,
    "HighPrecision": 20,
    "Activation": 10,
    "Clipping": 10,
    "Image": 10,
    "PostQuantAlgo": 10,
    "PreQuantAlgo": 10,
}
HAILO_ORDER = list(HAILO_PRIORITIES)  # Hailo's default order, as its sources sort it


def test_the_default_order_is_hailos_by_priority() -> None:
    shipped = [
        e.builder
        for e in INSPECTORS.entries()
        if e.builder.__module__.startswith("model_explorer.analysis.diagnose.inspectors.")
    ]
    # Hailo's, ours (Coverage, medium) among them by name, and Sensitivity last
    ours = {"Coverage": 20, "Sensitivity": 0}
    assert {c.name: c.priority for c in shipped} == {**HAILO_PRIORITIES, **ours}
    by_priority = [c.name for c in sorted(shipped, key=lambda c: (-c.priority, c.name))]
    hailos = [name for name in by_priority if name not in ours]
    assert list(DEFAULT_ORDER) == by_priority and hailos == HAILO_ORDER
    assert by_priority[-1] == "Sensitivity"
    assert DEFAULT_ORDER[:2] == ("BatchNorm", "Norm")


def test_the_order_help_lists_the_default_order() -> None:
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    [order] = [a for a in commands.choices["diagnose"]._actions if a.dest == "order"]
    listed = order.help.split("default:")[1]
    positions = [listed.index(name) for name in DEFAULT_ORDER]
    assert positions == sorted(positions)


def test_the_debug_log_beside_the_log(data: dict, tmp_path: Path) -> None:
    path = write_workload(data, tmp_path / "w.yaml")
    diagnose(Workload.load(path), ["Clipping"], tmp_path / "out", echo=lambda line: None)
    debug = (tmp_path / "out" / ".debug.diagnostic.log").read_text()
    assert "INFO model_explorer.analysis.diagnose.base: Module: Clipping" in debug
    assert "DEBUG model_explorer.analysis.diagnose.base: Inspector module has finished" in debug
    assert "DEBUG model_explorer.analysis.diagnose.inspectors.clipping: Clipping 0.input" in debug


def test_the_command_writes_the_debug_log_unless_no_debug(data: dict, tmp_path: Path) -> None:
    data["workload"]["calibration"]["method"] = "percentile"
    path = write_workload(data, tmp_path / "w.yaml")
    for name, extra in (("loud", []), ("quiet", ["--no-debug"])):
        log = tmp_path / name / "run.log"
        arguments = ["diagnose", str(path), "--order", "PreQuantAlgo", "--log-path", str(log)]
        assert cli.main([*arguments, "--no-interactive", *extra]) == 0
        assert log.exists()
    debug = (tmp_path / "loud" / ".debug.run.log").read_text()
    for layer, values in (("0", 64), ("2", 1024), ("7", 256)):
        assert f"PreQuantAlgo {layer}.input_quantizer: {values} values per sample" in debug
    assert not (tmp_path / "quiet" / ".debug.run.log").exists()
