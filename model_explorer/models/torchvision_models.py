"""`torchvision:<name>` builds any torchvision classification model, randomly initialised;
`resnet18` and `resnet50`, the original tool's names, build torchvision's.

Pretrained torchvision weights would download; this project loads weights only from the
checkpoint file named by `model.weights`, so `weights=None` is always passed.
"""

from __future__ import annotations

import functools
from typing import Any

from torch import nn

from model_explorer.errors import UserError, did_you_mean


def classification_models() -> list[str]:
    """Names of torchvision's classification models (not detection, segmentation, video...)."""
    import torchvision.models

    return sorted(torchvision.models.list_models(module=torchvision.models))


def torchvision_model(name: str, **kwargs: Any) -> nn.Module:
    import torchvision.models

    known = classification_models()
    if name not in known:
        raise UserError(
            f"model.type: torchvision has no classification model '{name}'"
            f"{did_you_mean(name, known)}; see torchvision.models.list_models()"
        )
    return torchvision.models.get_model(name, weights=None, **kwargs)


# the original tool's names (models/spec.py declares them)
resnet18 = functools.partial(torchvision_model, "resnet18")
resnet50 = functools.partial(torchvision_model, "resnet50")
