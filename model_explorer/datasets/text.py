"""Sentences as token ids, for transformer encoders: `type: sentences`.

Without a `path`, the sentences are those of Python's own documentation of the language (the
`pydoc_data` topics that every CPython ships for `help()`): about 2,900 sentences of technical
English prose, on every machine that runs Python, with no download and nothing to license
separately. With a `path`, a UTF-8 text file, one text per line. Either way the texts are
split deterministically (60 / 20 / 20 %) and tokenised once with the tokenizer of `tokenizer` (a
model that ships one, e.g. `all_minilm_l6_v2`, or a Hugging Face tokenizer folder), padded to
`max_length`. The sentences have no labels (every target is 0): score them with a fidelity
metric (`cosine`, `agreement`, `kl`), which compares with the float model's outputs.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

from model_explorer.datasets.spec import DatasetSpec, SentencesOptions
from model_explorer.errors import UserError
from model_explorer.schema.paths import resolve_path

SPLIT_FRACTIONS = {"train": 0.6, "validation": 0.2}


def python_docs_sentences(min_words: int = 5, max_words: int = 40) -> list[str]:
    """The sentences of the language reference topics that CPython ships for `help()`."""
    from pydoc_data.topics import topics

    text = " ".join(topics[name] for name in sorted(topics))
    found = []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        sentence = " ".join(sentence.split())
        words = sentence.split(" ")
        if min_words <= len(words) <= max_words and sentence[0].isupper():
            found.append(sentence)
    return sorted(set(found))


def _texts(spec: DatasetSpec, where: str) -> list[str]:
    if spec.path is None:
        return python_docs_sentences()
    try:
        lines = spec.resolve(spec.path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(
            f"{where}.path: cannot read '{spec.path}' as UTF-8 text ({error})"
        ) from None
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise UserError(f"{where}.path: '{spec.path}' holds no text (one text per line)")
    return texts


def _split(texts: list[str], split: str, seed: int) -> list[str]:
    order = np.random.default_rng(seed).permutation(len(texts))
    train = int(len(texts) * SPLIT_FRACTIONS["train"])
    validation = train + int(len(texts) * SPLIT_FRACTIONS["validation"])
    ranges = {"train": order[:train], "validation": order[train:validation]}
    ranges.update(test=order[validation:], all=np.arange(len(texts)))
    return [texts[i] for i in np.sort(ranges[split])]


def tokenizer_folder(name: str, where: str, root: Path | None = None) -> Path:
    """The folder of a tokenizer: a packaged model's, or a folder given by path (relative to
    the workload's `root`)."""
    if (folder := resolve_path(name, root)).is_dir():
        return folder
    if name == "all_minilm_l6_v2":
        from model_explorer.models.sentence_embedding import minilm_folder

        return minilm_folder()
    raise UserError(
        f"{where}.tokenizer: '{name}' is neither a tokenizer folder nor a model that ships one "
        "(all_minilm_l6_v2)"
    )


def sentences(spec: DatasetSpec, where: str) -> Dataset:
    options: SentencesOptions = spec.options
    texts = _split(_texts(spec, where), options.split, options.split_seed)
    folder = tokenizer_folder(options.tokenizer, where, spec.resolve("."))
    from model_explorer.models.sentence_embedding import offline

    offline()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ids = tokenizer(
        texts,
        padding="max_length",
        truncation=True,
        max_length=options.max_length,
        return_tensors="pt",
    )["input_ids"]
    return TensorDataset(ids, torch.zeros(len(texts), dtype=torch.long))
