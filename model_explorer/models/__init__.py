"""Model registry: built-in small nets, torchvision models by name, `package.module:factory`."""

from __future__ import annotations

# Explicit imports register the built-in builders; nothing else runs at import.
from model_explorer.models import builtin as _builtin  # noqa: E402,F401
from model_explorer.models import torchvision_models as _torchvision  # noqa: E402,F401
from model_explorer.models.registry import (
    MODELS,
    ModelInfo,
    build_model,
    create_model,
    load_checkpoint,
    register_model,
    save_checkpoint,
)

__all__ = [
    "MODELS",
    "ModelInfo",
    "build_model",
    "create_model",
    "load_checkpoint",
    "register_model",
    "save_checkpoint",
]
