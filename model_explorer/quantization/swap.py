"""Which modules of a model become quantized layers, and the swap itself.

Convolution and linear layers are swapped for transformed layers with quantizers (also
subclasses that keep the float forward, such as MultiheadAttention's
`NonDynamicallyQuantizableLinear`). `nn.MultiheadAttention` is swapped whole for a
QuantMultiheadAttention whose projections (and, optionally, activation products) are the
quantized layers, and nn.RNN, nn.GRU and nn.LSTM (of exactly these types) for a QuantRNN,
QuantGRU or QuantLSTM whose input and hidden products are (recurrent.py). Layers (and
attention modules) that a SparseModel transformed already are not swapped again: they get
quantizers attached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from model_explorer.modules import selected, set_child
from model_explorer.quantization.attention import QuantMultiheadAttention
from model_explorer.quantization.layers import TRANSFORMED_LAYERS, TransformedLayer
from model_explorer.quantization.own_forward import (
    linear_layout,
    linear_like_class,
    own_forward_class,
)
from model_explorer.quantization.quantizer import TensorQuantizer
from model_explorer.quantization.recurrent import QUANTIZED, RECURRENT, QuantRecurrent

ATTENTION = "MultiheadAttention"
# Layer types (names as in torch.nn) that have a fake-quantized counterpart.
SWAPPABLE = (*TRANSFORMED_LAYERS, ATTENTION, *RECURRENT)

# Modules handled as what they are (never probed as Linear-like): the quantizable types and
# attention, whose projections are layers of their own.
QUANTIZABLE_TYPES = (
    *(cls.float_type for cls in TRANSFORMED_LAYERS.values()),
    nn.MultiheadAttention,
    nn.RNNBase,
    TransformedLayer,
)

MakeQuantizers = Callable[[], tuple[TensorQuantizer, TensorQuantizer]]


@dataclass
class Swap:
    """What a swap did: the quantized layers by name (model order), the float modules it
    replaced (to put back) and the modules transformed already that it attached quantizers to
    (to take them off again: `set_quantizers()`)."""

    layers: dict[str, nn.Module] = field(default_factory=dict)
    replaced: dict[str, nn.Module] = field(default_factory=dict)
    attached: dict[str, nn.Module] = field(default_factory=dict)


def _quant_class(module: nn.Module, wanted: dict[type, type]) -> type[TransformedLayer] | None:
    """The transformed class for `module`: its type's, its float base's when a subclass keeps
    the base's forward, or one made for a subclass with a forward of its own (own_forward.py:
    its forward runs, its product quantized)."""
    cls = wanted.get(type(module))
    if cls is not None:
        return cls
    for base, quant in wanted.items():
        if isinstance(module, base):
            if type(module).forward is base.forward:
                return quant
            return own_forward_class(type(module), quant)
    if nn.Linear in wanted and not isinstance(module, QUANTIZABLE_TYPES):
        found = linear_layout(module)
        if found is not None:
            return linear_like_class(type(module), *found)
    return None


def swap_layers(
    model: nn.Module,
    layer_types: Sequence[str],
    include: Sequence[str],
    exclude: Sequence[str],
    make: MakeQuantizers,
    product: Callable[[], nn.Module] | None = None,
) -> Swap:
    """Swap, in place, the chosen modules of `model` for quantized ones; `make()` gives a
    layer's quantizers, `product()` (when attention products are quantized) a product's."""
    swap = Swap()
    types = [TRANSFORMED_LAYERS[n] for n in layer_types if n in TRANSFORMED_LAYERS]
    wanted = {cls.float_type: cls for cls in types}
    done: list[str] = []  # swapped attention and recurrent modules: their children are theirs
    for name, module in list(model.named_modules()):
        if not name or any(name.startswith(prefix + ".") for prefix in done):
            continue
        if isinstance(module, nn.MultiheadAttention) and ATTENTION in layer_types:
            chosen = [include, exclude]
            _swap_attention(model, name, module, make, product, chosen, swap)
            done.append(name)
            continue
        if type(module) in QUANTIZED and type(module).__name__ in layer_types:
            _swap_recurrent(model, name, module, make, [include, exclude], swap)
            done.append(name)
            continue
        if isinstance(module, TransformedLayer):  # a SparseModel's: attach quantizers if free
            free = "input_quantizer" not in module.transforms
            if free and module.float_type in wanted and selected(name, include, exclude):
                module.set_quantizers(*make())
                swap.layers[name] = swap.attached[name] = module
            continue
        cls = _quant_class(module, wanted)
        if cls is None or not selected(name, include, exclude):
            continue
        layer = cls.from_float(module, *make())
        set_child(model, name, layer)
        swap.layers[name] = layer
        swap.replaced[name] = module
    return swap


def _swap_attention(
    model: nn.Module,
    name: str,
    module: nn.MultiheadAttention,
    make: MakeQuantizers,
    product: Callable[[], nn.Module] | None,
    chosen: list[Sequence[str]],
    swap: Swap,
) -> None:
    """Swap one attention module (or quantize one a SparseModel opened); its projections (and
    products) not chosen by `include` / `exclude` stay in float."""
    if isinstance(module, QuantMultiheadAttention):
        layer = module
        layer.set_quantizers(make, product)
        swap.attached[name] = layer
    else:
        layer = QuantMultiheadAttention.from_float(module, make, product)
        set_child(model, name, layer)
        swap.replaced[name] = module
    _take_chosen(name, layer, chosen, swap)


def _take_chosen(name: str, layer: Any, chosen: list[Sequence[str]], swap: Swap) -> bool:
    """Record the quantized layers inside `layer` (attention's projections, a recurrent
    layer's products) that `include` / `exclude` choose, by their full names; the others keep
    their quantizers off (float). Whether any was chosen."""
    taken = False
    for child, quantized in layer.quantized_layers().items():
        full = f"{name}.{child}"
        if selected(full, *chosen):
            swap.layers[full] = quantized
            taken = True
        else:
            quantized.input_quantizer.enabled = quantized.weight_quantizer.enabled = False
    return taken


def _swap_recurrent(
    model: nn.Module,
    name: str,
    module: nn.RNNBase,
    make: MakeQuantizers,
    chosen: list[Sequence[str]],
    swap: Swap,
) -> None:
    """Swap one recurrent layer; its products not chosen by `include` / `exclude` (by their
    names, `rnn.ih_l0`, `rnn.hh_l0`, ...) stay in float."""
    layer: QuantRecurrent = QuantRecurrent.from_float(module, make)
    if _take_chosen(name, layer, chosen, swap):
        set_child(model, name, layer)
        swap.replaced[name] = module
