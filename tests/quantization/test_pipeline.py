"""The calibrate command and the workload-level quantized model, on the trained digits model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from model_explorer.cli import main
from model_explorer.errors import UserError
from model_explorer.models import save_checkpoint
from model_explorer.operations.pipeline import build_quantized_model, calibrate_workload
from model_explorer.workload.context import WorkloadContext
from model_explorer.workload.file import Workload
from tests_support import digits_workload_file


@pytest.fixture
def digits_workload(trained_digits, tmp_path: Path) -> Path:  # noqa: ANN001
    return digits_workload_file(trained_digits, tmp_path)


def test_calibrate_writes_refuses_and_forces(digits_workload: Path, capsys) -> None:
    assert main(["calibrate", str(digits_workload)]) == 0
    assert (
        "calibrated 5 input quantizers of digits_cnn on 512 samples (mse)"
        in capsys.readouterr().out
    )
    file = digits_workload.parent / "calibration.pt"
    written = file.stat().st_mtime_ns
    assert main(["calibrate", str(digits_workload)]) == 2
    assert "exists; pass --force to overwrite it" in capsys.readouterr().err
    assert main(["calibrate", "--if-missing", str(digits_workload)]) == 0
    assert file.stat().st_mtime_ns == written
    assert main(["calibrate", "--force", str(digits_workload)]) == 0
    assert file.stat().st_mtime_ns != written


def test_loaded_calibration_equals_fresh_calibration(digits_workload: Path) -> None:
    context = WorkloadContext(Workload.load(digits_workload), device="cpu")
    calibrated, _, _ = calibrate_workload(context)
    loaded = build_quantized_model(context)
    batches = context.batches("exploration")
    for bits in ([8] * 10, [3, 5, 4, 2, 6, 7, 8, 3, 4, 5]):
        calibrated.bit_widths = loaded.bit_widths = bits
        with torch.no_grad():
            for x, _ in batches:
                assert torch.equal(calibrated(x), loaded(x))


def test_quantized_accuracy_degrades_gracefully(digits_workload: Path) -> None:
    context = WorkloadContext(Workload.load(digits_workload), device="cpu")
    model, _, _ = calibrate_workload(context)
    float_accuracy = context.evaluate(context.build_model(), "exploration")
    accuracies = {}
    for bits in (8, 4, 2):
        model.bit_widths = [bits] * len(model.bit_widths)
        accuracies[bits] = context.evaluate(model, "exploration")
    assert accuracies[8] >= float_accuracy - 0.01
    assert accuracies[8] >= accuracies[4] >= accuracies[2]
    assert accuracies[2] < accuracies[8] - 0.1  # two bits everywhere costs a tenth at least


def test_stale_calibration_is_redone_under_if_missing(digits_workload: Path, caplog) -> None:
    context = WorkloadContext(Workload.load(digits_workload), device="cpu")
    calibrate_workload(context)
    changed = context.build_model()
    with torch.no_grad():
        changed[0].weight.mul_(1.5)
    save_checkpoint(changed, context.workload.model.weights + ".changed.pt")
    data = yaml.safe_load(digits_workload.read_text())
    data["workload"]["model"]["weights"] += ".changed.pt"
    digits_workload.write_text(yaml.safe_dump(data))
    other = WorkloadContext(Workload.load(digits_workload), device="cpu")
    build_quantized_model(other)
    assert "calibrated on other weights" in caplog.text
    _, _, calibrated = calibrate_workload(other, if_missing=True)
    assert calibrated


def test_missing_calibration_file_is_a_clear_error(digits_workload: Path, capsys) -> None:
    assert main(["evaluate", str(digits_workload), "--bits", "8"]) == 2
    assert "workload.calibration.file: '" in capsys.readouterr().err
    context = WorkloadContext(Workload.load(digits_workload), device="cpu")
    with pytest.raises(UserError, match="make it with `model-explorer calibrate WORKLOAD`"):
        build_quantized_model(context)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"method": "max"}, "method 'mse' there"),
        ({"start_bin": 64}, "calibration.start_bin 128 there, 64 here"),
        ({"datasets.calibrate.sample_limit": 256}, "sample_limit 512 there, 256 here"),
        ({"seed": 3}, "seed 0 there, 3 here"),
    ],
)
def test_a_calibration_file_of_other_settings_is_refused_or_redone(
    digits_workload: Path, capsys, change: dict, named: str
) -> None:
    """The file records its method, options, data and seed: a workload that changed one is
    refused with the setting named (evaluate), and `calibrate --if-missing` redoes the file
    instead of keeping it; the redone file is then used."""
    assert main(["calibrate", str(digits_workload)]) == 0
    data = yaml.safe_load(digits_workload.read_text())
    body = data["workload"]
    for key, value in change.items():
        if key == "seed":
            body["seed"] = value
            continue
        *parents, last = key.split(".")
        target = body["calibration"]
        for parent in parents:
            target = target[parent]
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    digits_workload.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert main(["evaluate", str(digits_workload), "--bits", "8"]) == 2
    error = capsys.readouterr().err
    assert "was made with other calibration settings" in error and named in error
    file = digits_workload.parent / "calibration.pt"
    before = file.stat().st_mtime_ns
    assert main(["calibrate", "--if-missing", str(digits_workload)]) == 0
    assert file.stat().st_mtime_ns != before
    assert main(["evaluate", str(digits_workload), "--bits", "8"]) == 0


def test_evaluate_scores_a_plan_from_outside(digits_workload: Path, capsys, tmp_path: Path) -> None:
    """A per-quantizer plan (JSON, quantizer names) and the same in this project's plan form
    (YAML, layer names) give the accuracy of the calibrated model with those quantizers set
    by hand; a name the model does not have is one error with the closest name."""
    assert main(["calibrate", str(digits_workload)]) == 0
    context = WorkloadContext(Workload.load(digits_workload), device="cpu")
    model = build_quantized_model(context)
    names = list(model.quantizers)
    chosen = {name: 3 + index % 4 for index, name in enumerate(names)}
    chosen[names[1]] = "int4"  # a format's short name: the integer format at 4 bits
    for name, value in chosen.items():
        model.quantizers[name].num_bits = 4 if value == "int4" else value
    expected = context.evaluate(model, "baseline")
    as_json = tmp_path / "plan.json"
    as_json.write_text(json.dumps(chosen))
    layers: dict = {}
    for name, value in chosen.items():
        layer, role = name.rsplit(".", 1)
        key = ("input" if role == "input_quantizer" else "weight") + (
            "_format" if isinstance(value, str) else "_bits"
        )
        layers.setdefault(layer, {})[key] = value
    as_yaml = tmp_path / "plan.yaml"
    as_yaml.write_text(yaml.safe_dump(layers))
    capsys.readouterr()
    for plan in (as_json, as_yaml):
        assert main(["evaluate", str(digits_workload), "--plan", str(plan), "--json"]) == 0
        printed = capsys.readouterr().out
        results = json.loads(printed[printed.index("[") :])
        [scored] = [r for r in results if r["model"] == f"plan {plan.name}"]
        assert scored["accuracy"] == pytest.approx(expected)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({names[0].replace("input", "inptu"): 4}))
    assert main(["evaluate", str(digits_workload), "--plan", str(wrong)]) == 2
    error = capsys.readouterr().err
    assert "is no quantizer of the model" in error and f"did you mean '{names[0]}'" in error


def test_the_seed_matters_to_a_calibration_only_where_it_draws_the_subset() -> None:
    """select_indices draws a sample_limit's subset and a shuffle by the seed, and takes the
    whole split in order otherwise: only then is the seed part of what a file was made from."""
    from model_explorer.datasets.base import select_indices
    from model_explorer.quantization.recipe import calibration_recipe, recipe_difference
    from model_explorer.quantization.spec import CalibrationSpec

    def spec(**data: object) -> CalibrationSpec:
        calibrate = {"type": "digits", "split": "train", **data}
        return CalibrationSpec.model_validate(
            {"method": "max", "datasets": {"calibrate": calibrate}}
        )

    whole = spec()
    assert (select_indices(100, None, False, 0) == select_indices(100, None, False, 7)).all()
    assert recipe_difference(calibration_recipe(whole, 0), calibration_recipe(whole, 7)) is None
    limited = spec(sample_limit=10)
    assert (select_indices(100, 10, False, 0) != select_indices(100, 10, False, 7)).any()
    difference = recipe_difference(calibration_recipe(limited, 0), calibration_recipe(limited, 7))
    assert difference == "seed 0 there, 7 here"
