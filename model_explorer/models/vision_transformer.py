"""A small vision transformer for scikit-learn's 8x8 digits, its attention through
nn.MultiheadAttention (as torchvision's ViT): the built-in model of the digits_vit workload."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: attention, then a two-layer MLP, each with a residual."""

    def __init__(self, dim: int, heads: int, mlp_dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Linear(mlp_dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """Patches by a strided convolution, a class token, learned positions, `depth` blocks."""

    def __init__(
        self,
        image_size: int = 8,
        patch_size: int = 2,
        in_channels: int = 1,
        num_classes: int = 10,
        dim: int = 32,
        depth: int = 2,
        heads: int = 4,
        mlp_dim: int = 64,
    ) -> None:
        super().__init__()
        patches = (image_size // patch_size) ** 2
        self.patch = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.position = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*(EncoderBlock(dim, heads, mlp_dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        # x.shape[0], not len(x): an ONNX export keeps the batch size free
        tokens = torch.cat([self.class_token.expand(x.shape[0], -1, -1), tokens], dim=1)
        tokens = self.blocks(tokens + self.position)
        return self.head(self.norm(tokens[:, 0]))


def digits_vit(num_classes: int = 10, in_channels: int = 1, **options: int) -> nn.Module:
    """A 2-block vision transformer (dim 32, 4 heads, 2x2 patches) for the 8x8 digits."""
    return VisionTransformer(num_classes=num_classes, in_channels=in_channels, **options)
