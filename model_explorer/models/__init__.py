"""Model registry: built-in small nets, torchvision models by name, `package.module:factory`."""

from __future__ import annotations

# Explicit imports register the built-in builders; nothing else runs at import.
from model_explorer.models import builtin as _builtin  # noqa: E402,F401
from model_explorer.models import efficientnet_lite as _efficientnet_lite  # noqa: E402,F401
from model_explorer.models import sentence_embedding as _sentence_embedding  # noqa: E402,F401
from model_explorer.models import torchvision_models as _torchvision  # noqa: E402,F401
from model_explorer.models import vision_transformer as _vision_transformer  # noqa: E402,F401
from model_explorer.models.checkpoints import (
    build_model,
    fold_batchnorm,
    load_checkpoint,
    save_checkpoint,
)
from model_explorer.models.registry import (
    MODELS,
    ModelInfo,
    ModelSpec,
    create_model,
    register_model,
)

__all__ = [
    "MODELS",
    "ModelInfo",
    "ModelSpec",
    "build_model",
    "create_model",
    "fold_batchnorm",
    "load_checkpoint",
    "register_model",
    "save_checkpoint",
]
