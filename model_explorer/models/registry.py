"""The model registry, the workload's `model:` settings, and models built by name."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from model_explorer.errors import UserError
from model_explorer.models.spec import MODELS
from model_explorer.schema.registry import call_user_code

# Model types of the original tool that were its own modules (or torch.hub downloads), not
# shipped here: a file naming one is told how to bring it.


def create_model(
    name: str,
    num_classes: int | None = None,
    where: str = "model",
    module_folders: Sequence[Path] = (),
    **kwargs: Any,
) -> nn.Module:
    """A freshly initialised model by name (no checkpoint; see `build_model`).

    Args:
        name: a registered model, `torchvision:<name>` or `package.module:factory`.
        num_classes: passed to the factory when given.
        where: the key path named in errors.
        module_folders: where a `package.module` not installed is looked for (a workload's
            root), before the working directory.
        **kwargs: the factory's other arguments (a workload's `model.kwargs`).
    """
    factory = MODELS.resolve(name, f"{where}.type", module_folders)
    if num_classes is not None:
        kwargs["num_classes"] = num_classes
    model = call_user_code(
        factory,
        kwargs,
        f"the model factory of '{name}'",
        f"{where}.kwargs",
        f"{where}.type",
        "fix the factory or model.kwargs",
    )
    if not isinstance(model, nn.Module):
        raise UserError(
            f"{where}.type: '{name}' returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model
