"""The original tool's workload layout: its keys accepted with their meaning (or ignored, as they
were there), its model types and its ImageNet dataset from an image folder or WebDataset shards.

The workload below is our own, written in the original's conventions (every key its files use),
on the digits data written as ImageNet is stored: an image folder and tar shards."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from digits_images import DigitsImages, write_digits_images

from model_explorer.cli import main
from model_explorer.datasets.digits import digits_split_indices
from model_explorer.errors import WorkloadError
from model_explorer.models import build_model
from model_explorer.results import ExplorationResult
from model_explorer.workload.file import Workload


def imagenet(path: str, kind: str, **keys) -> dict:
    # resize/crop are this project's options: the digits' own 8 pixels keep the test fast.
    return {"type": "imagenet", "kind": kind, "path": path, "resize": 8, "crop": 8, **keys}


def original_workload(train: DigitsImages, test: DigitsImages, folder: Path) -> dict:
    images = str(test.folder)
    return {
        "workload": {
            "problem": {
                "problem_function": "quantization_problem",
                "gpu_id": 0,
                "log_file": str(folder / "explore.log"),
                "clear_log_file": True,
                "results_file": str(folder / "results.pkl"),
            },
            "model": {
                "type": "digits_cnn",
                "accuracy_function": "classification_accuracy",
                "weights": str(folder / "baseline.pt"),
                "extra_args": {"weighting_function": "bits_weighted_per_layer"},
                "kwargs": {"in_channels": 3, "width": 8},
            },
            "calibration": {
                "samples": None,
                "file": str(folder / "calibration.pt"),
                "datasets": {
                    "calibrate": imagenet(
                        images, "imagefolder", sample_limit=64, batch_size=32, randomize=True
                    )
                },
            },
            "exploration": {
                "nsga": {
                    "pop_size": 4,
                    "offsprings": 4,
                    "generations": 1,
                    "mutation_eta": 10,
                    "mutation_prob": 1.0,
                    "crossover_eta": 5,
                    "crossover_prob": 1.0,
                },
                "minimum_accuracy": 0.3,
                "datasets": {
                    "exploration": imagenet(
                        images, "imagefolder", sample_limit=120, batch_size=64, randomize=True
                    ),
                    "baseline": imagenet(images, "imagefolder", sample_limit=None, batch_size=128),
                },
                "extra_args": {
                    "num_bits_upper_limit": 8,
                    "num_bits_lower_limit": 4,
                    "bit_weighting_function": "bits_weighted_per_layer",
                    "discrete_threshold_steps": 100,
                    "discrete_threshold_method": "linear",
                    "threshold_limit": 0.8,
                    "block_size": [8, 8],
                    "collect_sparsity_details": False,
                },
            },
            "retraining": {
                "epochs": 2,
                "learning_rate": 0.01,
                "datasets": {
                    "validation": imagenet(images, "imagefolder", sample_limit=200, batch_size=100),
                    "train": imagenet(
                        train.pattern,
                        "webdataset",
                        total_samples=len(train.labels),
                        batch_size=32,
                        sample_limit=None,
                    ),
                },
            },
            "reevaluation": {
                "bit_weighting_function": "bits_weighted_per_layer",
                "datasets": {
                    # Another type with the original's `kind`/`total_samples`: ignored there.
                    "reevaluate": {
                        "type": "digits",
                        "kind": None,
                        "total_samples": 359,
                        "split": "test",
                        "channels": 3,
                        "batch_size": 128,
                        "randomize": True,
                    }
                },
            },
        }
    }


@pytest.fixture(scope="module")
def digits_layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DigitsImages]:
    root = tmp_path_factory.mktemp("original_layout")
    splits = digits_split_indices(0)
    train = write_digits_images(root / "train", splits["train"], shards=4)
    test = write_digits_images(root / "test", splits["validation"], shards=1)
    path = root / "original.yaml"
    path.write_text(yaml.safe_dump(original_workload(train, test, root), sort_keys=False))
    return path, train


def test_every_original_key_is_accepted_with_its_meaning(digits_layout, caplog) -> None:
    path, _ = digits_layout
    with caplog.at_level(logging.INFO, logger="model_explorer.workload.file"):
        workload = Workload.load(path)
    assert workload.metric.type == "top1"  # classification_accuracy: argmax == label
    train = workload.retraining.datasets.train
    assert (train.options.kind, train.options.total_samples) == ("webdataset", 1077)
    reevaluate = workload.reevaluation.datasets.reevaluate
    assert reevaluate.type == "digits" and "kind" not in reevaluate.model_dump()
    # One INFO line names every key that had no effect in the original.
    (line,) = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    for key in (
        "workload.model.extra_args",
        "workload.calibration.samples",
        "workload.reevaluation.bit_weighting_function",
        "workload.exploration.extra_args.collect_sparsity_details",
        "workload.reevaluation.datasets.reevaluate.kind",
        "workload.reevaluation.datasets.reevaluate.total_samples",
    ):
        assert key in line
    # Result files keep this project's spelling only.
    body = workload.to_dict()["workload"]
    assert body["metric"] == {"type": "top1"} and "accuracy_function" not in body["model"]


def test_validate_retrain_calibrate_explore_on_the_original_layout(digits_layout, capsys) -> None:
    path, _ = digits_layout
    assert main(["validate", str(path)]) == 0
    assert "valid workload 'original'" in capsys.readouterr().out
    # Trained from the shards (streamed, shuffled by the seed), validated on the folder.
    assert main(["retrain", "--baseline", str(path), "--no-progress"]) == 0
    assert main(["calibrate", str(path)]) == 0
    output = path.parent / "result.pkl"
    assert main(["explore", str(path), "--output", str(output), "--no-progress"]) == 0
    result = ExplorationResult.load(output)
    # The baseline: the model trained on the 1077 shard images scores well on 359 other
    # images read from the folder (chance is 0.1).
    assert result.complete and result.baseline[0] > 0.6
    assert len(result) + result.stats["cache_hits"] == 4 + 4


@pytest.mark.parametrize(
    ("name", "metric"),
    [
        ("classification_accuracy", "top1"),
        ("segmentation_accuracy", "pixel_accuracy"),
        ("pixelwise_segmentation_accuracy", "pixel_accuracy"),
    ],
)
def test_accuracy_functions_map_to_metrics(name: str, metric: str) -> None:
    data = {"workload": {"model": {"type": "lenet5", "accuracy_function": name}}}
    assert Workload.from_dict(data).metric.type == metric


def test_accuracy_function_problems_are_listed_with_the_others() -> None:
    both = {
        "metric": "top5",
        "model": {"type": "lenet5", "accuracy_function": "classification_accuracy"},
    }
    with pytest.raises(WorkloadError, match="original spelling of workload.metric"):
        Workload.from_dict({"workload": both})
    detection = {
        "seed": -1,
        "model": {"type": "lenet5", "accuracy_function": "detection_accuracy"},
    }
    with pytest.raises(WorkloadError) as error:
        Workload.from_dict({"workload": detection})
    lines = str(error.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("workload.model.accuracy_function: 'detection_accuracy'")
    assert "has no counterpart here" in lines[0] and "top1" in lines[0]
    assert lines[1].startswith("workload.seed: must not be negative")


def test_original_model_types() -> None:
    """resnet18/resnet50 are torchvision's (REFERENCE parameter counts); the original's own
    modules say how to bring them; weights: null meant a download and needs a local file."""
    counts = {"resnet18": 11_689_512, "resnet50": 25_557_032}
    for name, count in counts.items():
        workload = Workload.from_dict({"workload": {"model": {"type": name, "pretrained": False}}})
        model = build_model(workload.model)  # random initial weights, asked for explicitly
        assert sum(p.numel() for p in model.parameters()) == count
    with pytest.raises(WorkloadError, match=r"model.weights: null meant .* set model.weights to"):
        Workload.from_dict({"workload": {"model": {"type": "resnet50", "weights": None}}})
    with pytest.raises(WorkloadError, match="model.pretrained: pretrained weights would be"):
        Workload.from_dict({"workload": {"model": {"type": "resnet18", "pretrained": True}}})
    for name in ("resnet9", "deeplabv3", "unet", "yolop", "yolov5s"):
        with pytest.raises(WorkloadError) as error:
            Workload.from_dict({"workload": {"model": {"type": name}}})
        message = str(error.value)
        assert message.startswith("workload.model.type: ") and "\n" not in message
        assert "model.type: package.module:factory" in message


def test_the_cli_prints_one_error_line_per_problem(tmp_path: Path, capsys) -> None:
    data = {
        "workload": {
            "model": {"type": "yolop", "accuracy_function": "yolop_combined_accuracy"},
            "calibration": {
                "samples": None,
                "datasets": {"calibrate": {"type": "cityscapes", "kind": None, "path": "x"}},
            },
            "exploration": {
                "nsga": {"pop_size": 0},
                "datasets": {"exploration": {"type": "imagenet", "path": str(tmp_path)}},
            },
        }
    }
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    keys = [
        "workload.model.accuracy_function",
        "workload.model.type",
        "workload.calibration.datasets.calibrate.type",
        "workload.exploration.nsga.pop_size",
        "workload.exploration.datasets.exploration.kind",
    ]
    assert len(lines) == len(keys), lines
    for line, key in zip(sorted(lines), sorted(keys), strict=True):
        assert line.startswith(f"error: {path}: {key}: "), line
