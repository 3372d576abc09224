"""EfficientNet-Lite0 on the photographs that ship with scikit-image and scikit-learn: the
published network classifies the photographs whose content is an ImageNet class as that class
(torchvision's list of the ImageNet classes names them), the crops are distinct, deterministic
and split by photograph, and the shipped workload validates and runs a short search."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from conftest import REPOSITORY, write_workload
from model_explorer.cli import main

pytest.importorskip("skimage", reason="the photos extra is not installed")
pytest.importorskip("efficientnet_lite_pytorch", reason="the photos extra is not installed")

from model_explorer.datasets.photos import Photos, PhotosOptions, crops, photographs  # noqa: E402

WORKLOAD = REPOSITORY / "workloads" / "efficientnet_lite0_photos.yaml"
# photograph -> ImageNet classes of what it shows (one must be among the float top-5)
CONTENT = {
    "chelsea.png": {"tabby", "tiger cat", "Egyptian cat"},
    "coffee.png": {"espresso", "cup", "coffee mug"},
    "rocket.jpg": {"missile", "projectile", "space shuttle"},
    "motorcycle_left.png": {"moped", "motor scooter"},
    "camera.png": {"tripod", "reflex camera", "Polaroid camera"},
    "china.jpg": {"palace", "bell cote", "monastery", "pagoda"},
    "flower.jpg": {"daisy"},
}


def test_the_network_names_what_the_photographs_show() -> None:
    from torchvision.models import ResNet18_Weights

    from model_explorer.models import create_model

    categories = ResNet18_Weights.IMAGENET1K_V1.meta["categories"]
    model = create_model("efficientnet_lite0")
    dataset = Photos(PhotosOptions(split="all"))
    names = [name for name, _ in photographs()]
    # each photograph's whole centre square, not mirrored
    first = {}
    for photo, name in enumerate(names):
        whole = [(i, c) for i, c in enumerate(dataset.crops) if c[0] == photo and not c[4]]
        side = max(c[3] for _, c in whole)
        whole = [i for i, c in whole if c[3] == side]
        first[name] = whole[len(whole) // 2]
    missed = {}
    with torch.no_grad():
        for name, classes in CONTENT.items():
            scores = model(dataset[first[name]][0].unsqueeze(0))[0]
            top5 = {categories[i] for i in scores.topk(5).indices.tolist()}
            if not top5 & classes:
                missed[name] = sorted(top5)
    assert not missed, missed


def test_its_batch_norms_fold_into_the_subclassed_convolutions() -> None:
    """Every batch norm folded into the `Conv2dStaticSamePadding` before it (torch's own `fuse`
    matches exact types and leaves them), the convolutions still of their class, and the
    network computing what it computed."""
    from torch import nn

    from model_explorer.models import create_model
    from model_explorer.models.checkpoints import fold_batchnorm

    model = create_model("efficientnet_lite0")
    folded = fold_batchnorm(model)
    called = [
        folded.get_submodule(node.target) for node in folded.graph.nodes if node.op == "call_module"
    ]
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in called)
    convolutions = [m for m in called if isinstance(m, nn.Conv2d)]
    assert len(convolutions) == 49
    assert {type(m).__name__ for m in convolutions} == {"Conv2dStaticSamePadding"}
    inputs = Photos(PhotosOptions(split="calibrate"))[0][0].unsqueeze(0)
    with torch.no_grad():
        torch.testing.assert_close(folded(inputs), model(inputs), rtol=1e-3, atol=1e-3)


def test_the_crops_are_distinct_deterministic_and_split_by_photograph() -> None:
    splits = {name: crops(name) for name in ("calibrate", "explore", "test")}
    photos = {name: {c[0] for c in found} for name, found in splits.items()}
    for name, found in splits.items():
        assert len(set(found)) == len(found)
        assert all(not photos[name] & photos[other] for other in splits if other != name)
    assert sum(len(found) for found in splits.values()) == len(crops("all")) >= 600
    assert [len(photos[name]) for name in splits] == [5, 10, 5]
    one, other = Photos(PhotosOptions(split="explore")), Photos(PhotosOptions(split="explore"))
    for index in (0, 1, len(one) - 1):
        assert torch.equal(one[index][0], other[index][0])
    assert torch.equal(one[1][0], one[0][0].flip(-1))  # each crop is also mirrored


def test_the_workload_validates_and_a_short_search_runs(tmp_path: Path) -> None:
    data = yaml.safe_load(WORKLOAD.read_text())
    body = data["workload"]
    body["calibration"]["file"] = str(tmp_path / "calibration.pt")
    body["calibration"]["method"] = "max"
    body["calibration"]["datasets"]["calibrate"].update(sample_limit=8, batch_size=8)
    body["exploration"]["datasets"]["exploration"].update(sample_limit=8, batch_size=8)
    body["reevaluation"]["datasets"]["reevaluate"].update(sample_limit=8, batch_size=8)
    body["exploration"]["nsga"].update(pop_size=2, offsprings=2, generations=1)
    workload = str(write_workload(data, tmp_path / "efficientnet.yaml"))
    formats = WORKLOAD.with_name("efficientnet_lite0_photos_formats.yaml")
    assert main(["validate", str(WORKLOAD)]) == 0 and main(["validate", str(formats)]) == 0
    assert main(["calibrate", workload]) == 0
    assert main(["explore", workload, "--output", str(tmp_path / "result.pkl")]) == 0


@pytest.mark.parametrize("preprocessing", ["lite", "imagenet"])
def test_diagnose_takes_the_published_preprocessings_as_normalized(
    tmp_path: Path, preprocessing: str
) -> None:
    """The network's own (p - 127) / 128 fills [-1, 1] with stds of 0.3-0.45 on these
    photographs, torchvision's ImageNet standardization gives stds near 1: neither is a reason
    to re-normalize or retrain a published network."""
    from model_explorer.analysis.diagnose.base import DiagnosisContext, run_inspectors
    from model_explorer.workload.context import WorkloadContext
    from model_explorer.workload.file import Workload

    data = yaml.safe_load(WORKLOAD.read_text())
    calibrate = data["workload"]["calibration"]["datasets"]["calibrate"]
    calibrate.update(sample_limit=16, batch_size=16, preprocessing=preprocessing)
    workload = Workload.load(write_workload(data, tmp_path / "efficientnet.yaml"))
    context = DiagnosisContext(WorkloadContext(workload, device="cpu"), tmp_path / "out")
    [finding] = run_inspectors(context, ["Norm"])
    assert finding.severity == "info", finding.message
    assert ("[-1, 1]" in finding.message) == (preprocessing == "lite")
