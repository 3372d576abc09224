"""The workload's `model:` section and the registry of models, every built-in model declared
here with what it expects (its factory named by import path, imported when it is first built),
so that reading a workload imports no model (nor torch). The factories are in builtin.py,
vision_transformer.py, efficientnet_lite.py, sentence_embedding.py and torchvision_models.py;
create_model (registry.py) builds one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from model_explorer.errors import did_you_mean
from model_explorer.schema.registry import Registry
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


# name -> a factory of a torch.nn.Module
MODELS: Registry[Callable[..., Any]] = Registry("model", imports="model factory")


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


# The original tool's model types that are torchvision architectures, under its names; it
# loaded torchvision's ImageNet weights for them, here `model.weights` names a local file.
ORIGINAL_TORCHVISION = ("resnet18", "resnet50")

_BUILT_IN = "model_explorer.models"
for _name, _path, _info in (
    ("digits_cnn", "builtin:digits_cnn", ModelInfo((1, 8, 8))),
    ("lenet5", "builtin:lenet5", ModelInfo((1, 32, 32))),
    *(
        (f"resnet{depth}", f"builtin:resnet{depth}", ModelInfo((3, 32, 32)))
        for depth in (20, 32, 44, 56)
    ),
    ("digits_vit", "vision_transformer:digits_vit", ModelInfo((1, 8, 8))),
    (
        "efficientnet_lite0",
        "efficientnet_lite:efficientnet_lite0",
        ModelInfo((3, 224, 224), ships_weights=True),
    ),
    (  # input: 32 token ids
        "all_minilm_l6_v2",
        "sentence_embedding:all_minilm_l6_v2",
        ModelInfo((32,), ships_weights=True),
    ),
    *(
        (name, f"torchvision_models:{name}", ModelInfo((3, 224, 224), pretrained_in_original=True))
        for name in ORIGINAL_TORCHVISION
    ),
):
    MODELS.declare(_name, f"{_BUILT_IN}.{_path}", info=_info)
MODELS.declare_namespace("torchvision", f"{_BUILT_IN}.torchvision_models:torchvision_model")


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
