"""Models: the registry and the workload's `model:` settings (spec.py, no torch), the built-in
factories (small nets, digits_vit, efficientnet_lite0, all_minilm_l6_v2, torchvision models by
name; each imported when first built), create_model (registry.py) and checkpoints
(checkpoints.py: build_model, load and save, fold_batchnorm). Its public names load their
modules on first use (SPEC 1)."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "MODELS": "spec",
    "ModelInfo": "spec",
    "ModelSpec": "spec",
    "register_model": "spec",
    "create_model": "registry",
    "build_model": "checkpoints",
    "fold_batchnorm": "checkpoints",
    "load_checkpoint": "checkpoints",
    "save_checkpoint": "checkpoints",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
