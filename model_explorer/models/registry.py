"""The model registry, the workload's `model:` settings, and models built by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError
from torch import nn

from model_explorer.errors import UserError, did_you_mean
from model_explorer.schema.registry import Registry, call_user_code
from model_explorer.schema.specs import PositiveInt, Spec


@dataclass(frozen=True)
class ModelInfo:
    """What a built-in model expects: the shape of one input sample (C, H, W).
    `pretrained_in_original`: a model type of the original tool, which loaded downloaded
    pretrained weights for it when `weights` was null."""

    input_shape: tuple[int, ...]
    pretrained_in_original: bool = False
    # The factory loads trained weights that ship with an installed package: no checkpoint file
    # is needed (all_minilm_l6_v2).
    ships_weights: bool = False


MODELS: Registry[Callable[..., nn.Module]] = Registry("model", imports="model factory")


def register_model(
    name: str, input_shape: tuple[int, ...], ships_weights: bool = False
) -> Callable[[Any], Any]:
    """Register a model factory `f(num_classes=..., **kwargs) -> nn.Module` under `name`;
    `ships_weights` when the factory loads trained weights of its own."""
    return MODELS.register(name, info=ModelInfo(tuple(input_shape), ships_weights=ships_weights))


def model_info(name: str) -> Any:
    """What a registered model declares about itself (ModelInfo), or None."""
    entry = MODELS.lookup(name)
    return entry.info if entry is not None else None


def ships_weights(name: str) -> bool:
    """Whether a model's factory brings trained weights (no checkpoint file needed)."""
    return bool(getattr(model_info(name), "ships_weights", False))


# Model types of the original tool that were its own modules (or torch.hub downloads), not
# shipped here: a file naming one is told how to bring it.
ORIGINAL_MODULES = {
    "resnet9": "ResNet-9 for CIFAR-10",
    "deeplabv3": "DeepLabV3+ for Cityscapes",
    "unet": "U-Net on a timm ResNet-18 encoder",
    "yolop": "YOLOP, loaded from torch.hub",
    "yolov5s": "YOLOv5s, loaded from torch.hub",
}


class ModelSpec(Spec):
    """`type` is a registered name, `torchvision:<name>`, or `package.module:factory`."""

    type: str
    """The model: a built-in name (`model-explorer list models`), `torchvision:<name>`, or
    `package.module:factory`, a function of yours returning the `torch.nn.Module` (its module
    found in the workload's root, the working directory or installed packages)."""
    weights: str | None = None
    """The checkpoint file loaded into the model: a state dict, plain or under `state_dict`.
    Null: the model starts from random weights where `pretrained: false` says so, and is
    refused otherwise (unless its factory brings trained weights of its own)."""
    pretrained: bool | None = None
    """`false`: start from random weights when `weights` is null (e.g. to train a baseline);
    `true` is an error, as nothing is ever downloaded. `resnet18` and `resnet50` without
    `weights` need it set, as null once meant downloaded weights for them."""
    num_classes: PositiveInt | None = None
    """Passed to the model factory as `num_classes`; null: the factory's own default."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """The model factory's other keyword arguments (built-in models take `in_channels`)."""
    fold_batchnorm: bool = False
    """Fold every batch norm that directly follows a convolution or linear layer into it once
    the weights are loaded, as an integer deployment runs it (the model must be traceable by
    `torch.fx`). The search, `cost`, `blocks` and the energy analysis then see the folded
    model; `retrain --baseline` still trains and saves the unfolded one."""

    @field_validator("type")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if MODELS.accepts(value):
            return value
        if value in ORIGINAL_MODULES:
            raise PydanticCustomError(
                "original_model",
                "'{name}' ({what}) was a module of the original tool and is not shipped here; "
                "bring it as 'model.type: package.module:factory', naming a function of yours "
                "that returns the torch.nn.Module",
                {"name": value, "what": ORIGINAL_MODULES[value]},
            )
        names = MODELS.names()
        raise PydanticCustomError(
            "unknown_model",
            "unknown model '{name}'{hint}; use one of {known}, 'torchvision:<name>' or "
            "'package.module:factory'",
            {"name": value, "hint": did_you_mean(value, names), "known": ", ".join(names)},
        )

    @model_validator(mode="after")
    def _local_weights(self) -> ModelSpec:
        if self.pretrained:
            raise PydanticCustomError(
                "pretrained",
                "pretrained weights would be downloaded, which this project never does; set "
                "model.weights to a local checkpoint file instead",
                {"key": "pretrained"},
            )
        original = getattr(model_info(self.type), "pretrained_in_original", False)
        if original and self.weights is None and self.pretrained is None:
            raise PydanticCustomError(
                "weights_null",
                "null meant the original tool's downloaded pretrained weights for "
                "'{name}', which cannot be had here; set model.weights to a local checkpoint "
                "file, or set model.pretrained: false to start from random weights",
                {"key": "weights", "name": self.type},
            )
        return self


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
