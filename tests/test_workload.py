"""The workload schema: valid files load with their values; invalid ones name the key, in a line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPOSITORY, write_workload
from model_explorer.errors import WorkloadError
from model_explorer.workload.file import Workload, dataset_spec

ORIGINAL_TEMPLATE = Path(__file__).parent / "data" / "original_template.yaml"


def test_default_workload_loads_with_defaults_filled_in() -> None:
    workload = Workload.load(REPOSITORY / "workloads" / "digits_cnn.yaml")
    assert workload.name == "digits_cnn"
    assert workload.model.type == "digits_cnn"
    assert workload.exploration.nsga.pop_size == 16
    assert workload.exploration.nsga.generations == 20
    assert workload.exploration.nsga.offsprings == 16
    assert workload.problem.options.allowable_accuracy_drop == 0.02
    assert workload.problem.options.minimum_accuracy is None
    # Keys the file leaves out take the documented defaults.
    assert workload.problem.options.layer_bounds == {}
    assert workload.sparsity.block_size == (8, 8)
    spec, where = dataset_spec(workload, "exploration")
    assert (spec.type, spec.options.split, spec.batch_size) == ("digits", "validation", 120)
    assert where == "workload.exploration.datasets.exploration"


def test_original_template_layout_is_accepted() -> None:
    workload = Workload.load(ORIGINAL_TEMPLATE)
    options = workload.problem.options
    assert workload.problem.problem_function == "sparsity_problem"
    assert workload.problem.gpu_id == 0
    assert workload.problem.results_file == "results/sparsity_results.pkl"
    assert options.minimum_accuracy == [0.9, 0.85]
    assert options.predefined_parameters == [0.0, 0.1, 0.2]
    assert workload.energy_evaluation.input_shape == [1, 1, 8, 8]
    assert workload.sparsity.block_size == (8, 4)
    assert options.discrete_threshold_method == "log"
    assert options.threshold_limit == 2.5
    assert workload.calibration.datasets.calibrate.sample_limit == 512
    assert workload.calibration.datasets.calibrate.randomize is True
    assert workload.retraining.epochs == 3


def test_baseline_dataset_falls_back_to_exploration(default_workload_data: dict) -> None:
    workload = Workload.from_dict(default_workload_data)
    assert dataset_spec(workload, "baseline") == dataset_spec(workload, "exploration")
    assert dataset_spec(workload, "reevaluate")[0].options.split == "test"


def test_round_trip_through_plain_data(default_workload_data: dict) -> None:
    workload = Workload.from_dict(default_workload_data)
    again = Workload.from_dict(workload.to_dict())
    assert again == workload
    assert (
        again.exploration.datasets.exploration.options
        == workload.exploration.datasets.exploration.options
    )


def test_placeholder_workloads_validate_once_their_data_exists(tmp_path: Path, monkeypatch) -> None:
    for folder in ("cifar", "imagenet/train", "imagenet/val"):
        (tmp_path / folder).mkdir(parents=True)
    monkeypatch.setenv("CIFAR10_DIR", str(tmp_path / "cifar"))
    monkeypatch.setenv("IMAGENET_DIR", str(tmp_path / "imagenet"))
    cifar = Workload.load(REPOSITORY / "workloads" / "resnet18_cifar10.yaml")
    sparse = Workload.load(REPOSITORY / "workloads" / "resnet18_cifar10_sparsity.yaml")
    assert sparse.sparsity.exclude == ["conv1"]
    for name in ("digits_cnn_sparsity", "digits_cnn_joint"):
        assert Workload.load(REPOSITORY / "workloads" / f"{name}.yaml").sparsity.block_size == (
            4,
            4,
        )
    imagenet = Workload.load(REPOSITORY / "workloads" / "resnet50_imagenet.yaml")
    assert cifar.model.type == "torchvision:resnet18"
    assert imagenet.exploration.datasets.exploration.options.crop == 224


@pytest.mark.parametrize(
    "name", ["resnet18_cifar10", "resnet18_cifar10_sparsity", "resnet50_imagenet"]
)
def test_placeholder_paths_are_rejected_clearly_when_missing(name: str, monkeypatch) -> None:
    for variable in ("CIFAR10_DIR", "IMAGENET_DIR"):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(WorkloadError) as error:
        Workload.load(REPOSITORY / "workloads" / f"{name}.yaml")
    message = str(error.value)
    assert ".path: dataset path" in message and "is not set" in message
    assert Workload.load(REPOSITORY / "workloads" / f"{name}.yaml", check_paths=False).name == name


def _set(path: str, value):
    def mutate(data: dict) -> None:
        *parents, last = path.split(".")
        node = data["workload"]
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


def _delete(path: str):
    def mutate(data: dict) -> None:
        *parents, last = path.split(".")
        node = data["workload"]
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


# (mutation of the default workload, key path the message must name, words it must contain)
INVALID = {
    "negative pop_size": (
        _set("exploration.nsga.pop_size", -3),
        "workload.exploration.nsga.pop_size",
        "must be a positive integer, got -3",
    ),
    "misspelt nsga key": (
        _set("exploration.nsga.pop_sise", 3),
        "workload.exploration.nsga.pop_sise",
        "did you mean 'pop_size'",
    ),
    "misspelt section": (
        lambda d: d["workload"].update(exploraton=d["workload"].pop("exploration")),
        "workload.exploraton",
        "did you mean 'exploration'",
    ),
    "unknown dataset type": (
        _set("exploration.datasets.exploration.type", "digts"),
        "workload.exploration.datasets.exploration.type",
        "did you mean 'digits'",
    ),
    "misspelt dataset option": (
        _set("exploration.datasets.exploration.splt", "train"),
        "workload.exploration.datasets.exploration.splt",
        "did you mean 'split'",
    ),
    "dataset option value": (
        _set("exploration.datasets.exploration.split", "dev"),
        "workload.exploration.datasets.exploration.split",
        "got 'dev'",
    ),
    "unknown model": (
        _set("model.type", "resnt20"),
        "workload.model.type",
        "did you mean 'resnet20'",
    ),
    "probability above one": (
        _set("exploration.nsga.mutation_prob", 1.5),
        "workload.exploration.nsga.mutation_prob",
        "between 0 and 1, got 1.5",
    ),
    "accuracy in percent": (
        _set("problem.minimum_accuracy", 95),
        "workload.problem.minimum_accuracy",
        "fraction between 0 and 1, got 95",
    ),
    "accuracy list entry": (
        _set("problem.minimum_accuracy", [0.9, "high"]),
        "workload.problem.minimum_accuracy.1",
        "must be a number",
    ),
    "bit lower limit of one": (
        _set("problem.num_bits_lower_limit", 1),
        "workload.problem.num_bits_lower_limit",
        "between 2 and 16",
    ),
    "bit limits reversed": (
        _set("problem.num_bits_lower_limit", 9),
        "workload.problem.num_bits_lower_limit",
        "num_bits_lower_limit (9) is above num_bits_upper_limit (8)",
    ),
    "block size with one value": (
        _set("sparsity", {"block_size": [8]}),
        "workload.sparsity.block_size",
        "too few values",
    ),
    "threshold method": (
        _set(
            "problem",
            {"problem_function": "sparsity_problem", "discrete_threshold_method": "exp"},
        ),
        "workload.problem.discrete_threshold_method",
        "'linear' or 'log'",
    ),
    "device name": (_set("device", "gpu"), "workload.device", "got 'gpu'"),
    "missing model": (_delete("model"), "workload.model", "is required"),
    "missing dataset type": (
        _delete("exploration.datasets.exploration.type"),
        "workload.exploration.datasets.exploration.type",
        "is required",
    ),
    "unknown metric": (
        _set("metric", "top2"),
        "workload.metric.type",
        "unknown metric type 'top2'",
    ),
    "problem function": (
        _set("problem.problem_function", "quant_problem"),
        "workload.problem.problem_function",
        "did you mean 'quantization_problem'",
    ),
    "arrays without path": (
        _set("exploration.datasets.exploration", {"type": "arrays"}),
        "workload.exploration.datasets.exploration.path",
        "needs a 'path'",
    ),
    "missing data path": (
        _set("exploration.datasets.exploration", {"type": "cifar10", "path": "/no/such/cifar"}),
        "workload.exploration.datasets.exploration.path",
        "'/no/such/cifar' does not exist",
    ),
    "batch size text": (
        _set("retraining.datasets.train.batch_size", "big"),
        "workload.retraining.datasets.train.batch_size",
        "must be an integer, got 'big'",
    ),
    "section not a mapping": (
        _set("exploration.nsga", 5),
        "workload.exploration.nsga",
        "must be a mapping",
    ),
    "negative seed": (_set("seed", -1), "workload.seed", "must not be negative"),
    "calibration method": (
        _set("calibration.method", "histogram"),
        "workload.calibration.method",
        "must be one of entropy, max, mse, percentile, got unknown calibrator type 'histogram'",
    ),
    "option of another calibrator": (
        _set("calibration", {"method": "entropy", "percentile": 99.9}),
        "workload.calibration.percentile",
        "only the percentile calibrator takes 'percentile'; set 'method: percentile' or remove",
    ),
    "quantized layer type": (
        _set("quantization", {"layer_types": ["Conv2d", "Embedding"]}),
        "workload.quantization.layer_types.1",
        "got 'Embedding'",
    ),
    "quantizer bits": (
        _set("quantization", {"weight": {"num_bits": 32}}),
        "workload.quantization.weight.num_bits",
        "between 2 and 16 bits, got 32",
    ),
}


@pytest.mark.parametrize("case", INVALID, ids=list(INVALID))
def test_invalid_workload_names_the_key(case: str, default_workload_data: dict) -> None:
    mutate, key_path, words = INVALID[case]
    mutate(default_workload_data)
    with pytest.raises(WorkloadError) as error:
        Workload.from_dict(default_workload_data, source="w.yaml")
    message = str(error.value)
    assert message.startswith(f"w.yaml: {key_path}: "), message
    assert words in message
    assert "\n" not in message


def test_every_problem_is_reported_one_line_each(default_workload_data: dict) -> None:
    """Six planted faults in six places, of five kinds: one run names them all, each line
    naming its own key."""
    _set("seed", -1)(default_workload_data)
    _set("model.wieghts", "x.pt")(default_workload_data)
    _set("exploration.nsga.pop_size", 0)(default_workload_data)
    _set("exploration.nsga.generatoins", 3)(default_workload_data)
    _set("exploration.datasets.exploration.resize", 7)(default_workload_data)
    _set("exploration.datasets.exploration.nonsense", 1)(default_workload_data)
    with pytest.raises(WorkloadError) as error:
        Workload.from_dict(default_workload_data, source="w.yaml")
    lines = str(error.value).splitlines()
    expected = {
        "w.yaml: workload.seed: ": "must not be negative",
        "w.yaml: workload.model.wieghts: ": "did you mean 'weights'?",
        "w.yaml: workload.exploration.nsga.pop_size: ": "must be a positive integer",
        "w.yaml: workload.exploration.nsga.generatoins: ": "did you mean 'generations'?",
        "w.yaml: workload.exploration.datasets.exploration.resize: ": "must be one of 8, 16",
        "w.yaml: workload.exploration.datasets.exploration.nonsense: ": "unknown key",
    }
    assert len(lines) == len(expected), lines
    for prefix, words in expected.items():
        (line,) = [line for line in lines if line.startswith(prefix)]
        assert words in line, line


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="workload file does not exist"):
        Workload.load(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("workload:\n  model:\n    type: [digits_cnn\n  seed: 1\n")
    with pytest.raises(WorkloadError, match=r"broken.yaml line \d+: not valid YAML"):
        Workload.load(broken)
    rootless = write_workload({"model": {"type": "digits_cnn"}}, tmp_path / "rootless.yaml")
    with pytest.raises(WorkloadError, match="must start with the key 'workload:'"):
        Workload.load(rootless)
    extra_root = write_workload(
        {"workload": {"model": {"type": "digits_cnn"}}, "extra": 1}, tmp_path / "x.yaml"
    )
    with pytest.raises(WorkloadError, match="unknown top-level key 'extra'"):
        Workload.load(extra_root)


def test_cli_reports_an_invalid_workload_in_one_line_with_status_2(
    tmp_path: Path, default_workload_data: dict
) -> None:
    _set("exploration.nsga.pop_size", -3)(default_workload_data)
    path = write_workload(default_workload_data, tmp_path / "bad.yaml")
    done = subprocess.run(
        [sys.executable, "-m", "model_explorer", "validate", str(path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "workload.exploration.nsga.pop_size: must be a positive integer, got -3" in lines[0]


def test_minimal_workload_needs_only_a_model() -> None:
    workload = Workload.from_dict({"workload": {"model": {"type": "lenet5"}}})
    assert workload.exploration is None and workload.seed == 0 and workload.metric.type == "top1"
    with pytest.raises(WorkloadError, match="workload.exploration: this command needs"):
        workload.require("exploration")


def test_calibration_options_sit_beside_their_method(tmp_path: Path) -> None:
    # As files wrote it before calibrators were a registry: a method and none of its options.
    path = tmp_path / "w.yaml"
    path.write_text(
        "workload:\n  model: {type: digits_cnn, pretrained: false}\n"
        "  calibration: {file: c.pt, method: mse}\n"
    )
    calibration = Workload.load(path).calibration
    assert (calibration.method, calibration.file) == ("mse", "c.pt")
    assert calibration.options.model_dump() == {"num_bins": 2048, "start_bin": 128}

    def calibration_of(section: dict | str):
        data = {"workload": {"model": {"type": "lenet5"}, "calibration": section}}
        return Workload.from_dict(data).calibration

    tuned = calibration_of({"start_bin": 64, "num_bins": 1024})
    assert tuned.method == "mse"  # the default method
    assert tuned.options.model_dump() == {"start_bin": 64, "num_bins": 1024}
    assert calibration_of({"method": "max", "file": "c.pt"}).options is None
    assert calibration_of("entropy").options.start_bin == 128


def test_yaml_anchors_and_shorthand_metric(tmp_path: Path) -> None:
    text = """
workload:
  metric: {type: topk, k: 3}
  model: {type: digits_cnn}
  exploration:
    datasets:
      exploration: &digits {type: digits, split: validation, batch_size: 100}
      baseline: *digits
"""
    path = tmp_path / "anchors.yaml"
    path.write_text(text)
    workload = Workload.load(path)
    assert workload.metric.options.k == 3
    assert workload.exploration.datasets.baseline.batch_size == 100
    assert (
        yaml.safe_load(text)["workload"]["exploration"]["datasets"]["baseline"]["split"]
        == "validation"
    )


def test_inputs_are_unsigned_auto_unless_the_workload_says_otherwise() -> None:
    """The measured default (docs/quantization.md "Which quantizer setting"): input quantizers
    `unsigned: auto`, also when `input:` sets other keys; weights signed; an explicit value
    kept."""

    def quantization(section: dict | None):
        body = {"model": {"type": "lenet5"}}
        if section is not None:
            body["quantization"] = section
        return Workload.from_dict({"workload": body}).quantization

    assert quantization(None).input.unsigned == "auto"
    assert quantization({"input": {"num_bits": 4}}).input.unsigned == "auto"
    assert quantization({"input": {"unsigned": False}}).input.unsigned is False
    assert quantization({"input": {"asymmetric": True}}).input.asymmetric is True
    assert quantization(None).weight.unsigned is False
