"""Small built-in networks: a digits CNN, LeNet-5, and CIFAR-style ResNets (He et al., 2016)."""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn


def _conv_bn_relu(in_channels: int, out_channels: int) -> list[nn.Module]:
    return [
        nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(inplace=True),
    ]


def digits_cnn(num_classes: int = 10, in_channels: int = 1, width: int = 16) -> nn.Module:
    """Three convolutions and two linear layers for scikit-learn's 8x8 digits (any size works)."""
    return nn.Sequential(
        *_conv_bn_relu(in_channels, width),
        *_conv_bn_relu(width, 2 * width),
        nn.MaxPool2d(2),
        *_conv_bn_relu(2 * width, 2 * width),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(2 * width * 16, 64),
        nn.ReLU(inplace=True),
        nn.Linear(64, num_classes),
    )


def lenet5(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """LeNet-5 (LeCun et al., 1998) with ReLU and max pooling, for 32x32 inputs."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 6, 5),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 5 * 5, 120),
        nn.ReLU(inplace=True),
        nn.Linear(120, 84),
        nn.ReLU(inplace=True),
        nn.Linear(84, num_classes),
    )


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (a 1x1 projection when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False),
                nn.BatchNorm2d(out_channels),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet for 32x32 images: three stages of (depth - 2) / 6 basic blocks, 16/32/64 channels."""

    def __init__(self, depth: int, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise ValueError(f"CIFAR ResNet depth must be 6n + 2, got {depth}")
        blocks = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        layers = []
        channels = 16
        for stage, width in enumerate((16, 32, 64)):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, width, stride))
                channels = width
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        x = self.layers(self.relu(self.bn1(self.conv1(x))))
        return self.fc(self.pool(x).flatten(1))


def _cifar_resnet(depth: int) -> Callable[..., nn.Module]:
    def factory(num_classes: int = 10, in_channels: int = 3) -> nn.Module:
        return CifarResNet(depth, num_classes, in_channels)

    factory.__name__ = factory.__qualname__ = f"resnet{depth}"
    factory.__doc__ = f"CIFAR-style ResNet-{depth} for 32x32 inputs."
    return factory


# the factories models/spec.py declares
resnet20, resnet32, resnet44, resnet56 = (_cifar_resnet(depth) for depth in (20, 32, 44, 56))
