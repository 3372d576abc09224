"""SparseModel: a model whose Conv1d/Conv2d/Linear layers sparsify their input blocks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from model_explorer.errors import UserError
from model_explorer.modules import selected, set_child
from model_explorer.quantization.attention import open_attention
from model_explorer.quantization.layers import TRANSFORMED_LAYERS, TransformedLayer
from model_explorer.sparsity.sparsifier import BlockSparsifier
from model_explorer.sparsity.spec import SPARSIFIABLE_LAYERS
from model_explorer.tracing import Wrapper


def _sparsifiable(module: nn.Module, wanted: set[type[nn.Module]]) -> bool:
    """Whether `module` is a layer of a wanted type without a sparsifier: a float layer, or a
    layer a QuantizedModel transformed (one that another SparseModel sparsifies is left to it)."""
    if isinstance(module, TransformedLayer):
        return module.float_type in wanted and "sparsifier" not in module.transforms
    return type(module) in wanted


class SparseModel(Wrapper, nn.Module):
    """Gives every chosen layer of `model` a BlockSparsifier (in place); calling the SparseModel
    runs the model. Float layers are swapped for transformed layers (quantizers passing tensors
    through) with the sparsifier as their product; layers a QuantizedModel transformed already
    get the sparsifier attached, so one model can be quantized and sparse at once (the
    sparsifier then sees the quantized input and the quantized weights), whichever wraps first.

    Args:
        model: the model; its layers get sparsifiers in place.
        block_size: [width, height] of a block of the unfolded input (width along its
            C*kh*kw columns, height along its output positions).
        layer_types: the layer types to sparsify (Conv1d, Conv2d, Linear).
        include: shell-style patterns of module names to sparsify.
        exclude: shell-style patterns of module names to leave alone.
        chunk_bytes: the memory an unfolded input may take at once; larger inputs are
            sparsified in chunks.
    """

    def __init__(
        self,
        model: nn.Module,
        block_size: Sequence[int] = (8, 8),
        layer_types: Sequence[str] = SPARSIFIABLE_LAYERS,
        include: Sequence[str] = ("*",),
        exclude: Sequence[str] = (),
        chunk_bytes: int = 64 << 20,
    ) -> None:
        super().__init__()
        unknown = sorted(set(layer_types) - set(SPARSIFIABLE_LAYERS))
        if unknown:
            raise UserError(
                f"sparsity.layer_types: cannot sparsify {unknown}; supported: "
                f"{', '.join(SPARSIFIABLE_LAYERS)}"
            )
        wanted = {getattr(nn, name) for name in layer_types}
        self.model = model
        self.block_size = (int(block_size[0]), int(block_size[1]))
        self.sparsifiers: dict[str, BlockSparsifier] = {}
        self._layers: dict[str, TransformedLayer] = {}  # the layers holding the sparsifiers
        self._swapped: dict[str, nn.Module] = {}  # the float layers they replaced
        self._attention = open_attention(model) if nn.Linear in wanted else {}
        for name, module in list(model.named_modules()):
            if not name or not _sparsifiable(module, wanted):
                continue
            if not selected(name, include, exclude):
                continue
            transformed = isinstance(module, TransformedLayer)
            layer = module if transformed else self._transform(name, module)
            sparsifier = BlockSparsifier(self.block_size, chunk_bytes=chunk_bytes)
            layer.set_sparsifier(sparsifier)
            self._layers[name] = layer
            self.sparsifiers[name] = sparsifier
        if not self.sparsifiers:
            raise UserError(
                f"sparsity: the model has no layer of types {list(layer_types)} matching include "
                f"{list(include)} and exclude {list(exclude)}"
            )
        self.train(model.training)  # the wrapped model's mode, not nn.Module's default

    def _transform(self, name: str, module: nn.Module) -> TransformedLayer:
        """Swap a float layer for a transformed one (quantizers passing tensors through)."""
        layer = TRANSFORMED_LAYERS[type(module).__name__].from_float(module)
        set_child(self.model, name, layer)
        self._swapped[name] = module
        return layer

    @classmethod
    def from_spec(cls, model: nn.Module, spec: Any) -> SparseModel:
        """Build from the workload's `sparsity:` section."""
        return cls(
            model,
            spec.block_size,
            spec.layer_types,
            spec.include,
            spec.exclude,
            spec.chunk_mib << 20,
        )

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's forward, its sparsifiers in effect."""
        return self.model(*args, **kwargs)

    @property
    def explorable_modules(self) -> list[str]:
        """Sparsified layer names in module order (one threshold each)."""
        return list(self.sparsifiers)

    @property
    def thresholds(self) -> list[float]:
        """Every sparsifier's threshold, in `sparsifiers` order; settable as a list (each >= 0)."""
        return [s.threshold for s in self.sparsifiers.values()]

    @thresholds.setter
    def thresholds(self, values: Sequence[float]) -> None:
        if len(values) != len(self.sparsifiers):
            raise ValueError(f"expected {len(self.sparsifiers)} thresholds, got {len(values)}")
        for sparsifier, value in zip(self.sparsifiers.values(), values, strict=True):
            if value < 0:
                raise ValueError(f"thresholds must not be negative, got {value}")
            sparsifier.threshold = float(value)

    def reset_stats(self) -> None:
        """Zero every sparsifier's block counts."""
        for sparsifier in self.sparsifiers.values():
            sparsifier.reset_stats()

    def stats(self) -> dict[str, dict[str, int]]:
        """Per layer, over every sample since the last reset: total blocks, blocks that were
        all zero already ("present"), blocks the threshold zeroed ("created"), samples."""
        return {name: s.stats() for name, s in self.sparsifiers.items()}

    def restore(self) -> nn.Module:
        """Take the sparsifiers out again (putting back the float layers this model swapped)
        and return the model."""
        for layer in self._layers.values():
            layer.set_sparsifier(None)
        for name, module in self._swapped.items():
            set_child(self.model, name, module)
        for name, module in self._attention.items():
            set_child(self.model, name, module)
        return self.model
