"""Recurrent layers (nn.RNN, nn.GRU, nn.LSTM) computed in the open, their products quantized.

A recurrent layer multiplies, per layer and direction, its input by `weight_ih` and its previous
hidden state by `weight_hh` (an LSTM with `proj_size` also its hidden state by `weight_hr`).
Each of these products is a quantized layer of its own below the recurrent module, named as
torch names the weights without `weight_`: `rnn.ih_l0`, `rnn.hh_l0`, `rnn.hr_l0`,
`rnn.ih_l0_reverse`, ... Their input quantizers see the input sequence and each step's hidden
state, their weight quantizers the weights (per output row, every gate's row its own channel);
the gates' nonlinearities, the cell state and the state update stay in float, as in torch's
quantizable LSTM (torch.ao.nn.quantizable), which decomposes an LSTM into the same two products
per step and is the tests' oracle. The input products of a whole sequence are one call (the
input does not depend on the step); the hidden products are one call per step.

The module is the float module's class rebuilt (a QuantLSTM is an nn.LSTM): parameters,
`state_dict` keys and `flatten_parameters` stay the float module's; the products own no
parameter. PackedSequence inputs run with each sequence's own length, as torch's kernels do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from model_explorer.modules import rebuild
from model_explorer.quantization.layers import TransformedLayer, layer_forward

MakeQuantizers = Callable[[], tuple[nn.Module, nn.Module]]


class RecurrentProduct(TransformedLayer, nn.Linear):
    """One product of a recurrent layer (`weight_<name>` times its input, plus `bias_<name>`)
    as a transformed linear layer. It owns no parameter: `weight` and `bias` are the recurrent
    module's."""

    float_type = nn.Linear

    def __init__(self, owner: nn.RNNBase, name: str) -> None:
        nn.Module.__init__(self)
        object.__setattr__(self, "_owner", owner)  # not a submodule: no cycle in the tree
        self.product = name
        self.out_features, self.in_features = getattr(owner, f"weight_{name}").shape
        self.set_quantizers()
        self.set_sparsifier()

    @property
    def weight(self) -> Tensor:  # type: ignore[override]
        return getattr(self._owner, f"weight_{self.product}")

    @property
    def bias(self) -> Tensor | None:  # type: ignore[override]
        if not self._owner.bias or self.product.startswith("hr"):
            return None
        return getattr(self._owner, f"bias_{self.product}")

    def dense(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.linear(x, weight, self.bias)

    def extra_repr(self) -> str:
        sizes = f"in_features={self.in_features}, out_features={self.out_features}"
        return f"weight_{self.product}: {sizes}"


class QuantRecurrent:
    """Mixin of the quantized recurrent layers: the products as submodules, and the forward
    of nn.RNN / nn.GRU / nn.LSTM over them (see the module docstring)."""

    float_type: type[nn.RNNBase]
    mode: str
    num_layers: int
    bidirectional: bool
    batch_first: bool
    hidden_size: int
    proj_size: int
    dropout: float
    training: bool
    _modules: dict[str, nn.Module]

    @classmethod
    def from_float(cls, module: nn.RNNBase, make: MakeQuantizers | None = None) -> Any:
        """The counterpart of `module` (of the class for its mode), sharing its parameters,
        each product quantized with the (input, weight) quantizers `make()` gives (None:
        pass-throughs)."""
        layer = rebuild(module, QUANTIZED[type(module)])
        for name in layer.product_names():
            layer.add_module(name, RecurrentProduct(layer, name))
        layer.set_quantizers(make)
        return layer

    def product_names(self) -> list[str]:
        """The products in computation order: per layer and direction, input, hidden (and
        projection)."""
        suffixes = ["", "_reverse"] if self.bidirectional else [""]
        kinds = ["ih", "hh", "hr"] if self.proj_size else ["ih", "hh"]
        return [f"{k}_l{n}{s}" for n in range(self.num_layers) for s in suffixes for k in kinds]

    def set_quantizers(self, make: MakeQuantizers | None = None) -> None:
        for product in self.quantized_layers().values():
            product.set_quantizers(*(make() if make is not None else ()))

    def quantized_layers(self) -> dict[str, TransformedLayer]:
        """The products by their name below this module, in computation order."""
        return {name: self._modules[name] for name in self.product_names()}  # type: ignore[misc]

    # -- the computation ----------------------------------------------------------------------
    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:
        packed = isinstance(input, PackedSequence)
        lengths = None
        if packed:
            x, lengths = pad_packed_sequence(input)
            lengths = lengths.to(x.device)
            batched = True
        else:
            batched = input.dim() == 3
            x = input if batched else input.unsqueeze(1)
            if self.batch_first and batched:
                x = x.transpose(0, 1)
        state = self._initial(hx, x, batched)
        with layer_forward():  # the steps' additions are no residual additions to quantize
            out, last = self._layers(x, state, lengths)
        if packed:
            return _packed(out, input, lengths), self._final(last, batched)  # type: ignore[arg-type]
        return self._output(out, batched), self._final(last, batched)

    def _initial(self, hx: Any, x: Tensor, batched: bool) -> list[Tensor]:
        """The initial states as a list: [h] or, for an LSTM, [h, c], each (layers *
        directions, batch, size)."""
        directions = 2 if self.bidirectional else 1
        sizes = [self.proj_size or self.hidden_size]
        if self.mode == "LSTM":
            sizes.append(self.hidden_size)
        if hx is None:
            shape = (self.num_layers * directions, x.shape[1])
            return [x.new_zeros(*shape, size) for size in sizes]
        given = list(hx) if self.mode == "LSTM" else [hx]
        return [h if batched else h.unsqueeze(1) for h in given]

    def _final(self, last: list[Tensor], batched: bool) -> Any:
        last = [h if batched else h.squeeze(1) for h in last]
        return tuple(last) if self.mode == "LSTM" else last[0]

    def _output(self, out: Tensor, batched: bool) -> Tensor:
        if not batched:
            return out.squeeze(1)
        return out.transpose(0, 1) if self.batch_first else out

    def _layers(
        self, x: Tensor, state: list[Tensor], lengths: Tensor | None
    ) -> tuple[Tensor, list[Tensor]]:
        directions = 2 if self.bidirectional else 1
        last: list[list[Tensor]] = [[] for _ in state]
        for number in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                index = number * directions + direction
                suffix = f"_l{number}" + ("_reverse" if direction else "")
                out, final = self._direction(
                    x, [s[index] for s in state], suffix, direction == 1, lengths
                )
                outputs.append(out)
                for kept, value in zip(last, final, strict=True):
                    kept.append(value)
            x = torch.cat(outputs, dim=-1) if directions == 2 else outputs[0]
            if self.dropout and self.training and number < self.num_layers - 1:
                x = F.dropout(x, self.dropout, training=True)
        return x, [torch.stack(values) for values in last]

    def _direction(
        self,
        x: Tensor,
        state: list[Tensor],
        suffix: str,
        reverse: bool,
        lengths: Tensor | None,
    ) -> tuple[Tensor, list[Tensor]]:
        """One layer in one direction over the sequence: its outputs (zeros past a packed
        sequence's end) and its final state."""
        inputs = self._modules[f"ih{suffix}"](x)  # every step's input product at once
        hidden = self._modules[f"hh{suffix}"]
        project = self._modules.get(f"hr{suffix}")
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        outputs: list[Tensor] = [x.new_empty(0)] * x.shape[0]
        for step in steps:
            new = self._step(inputs[step], hidden, state)
            if project is not None:
                new[0] = project(new[0])
            if lengths is not None:  # a finished (or, reversed, not yet begun) sequence waits
                running = (step < lengths).unsqueeze(1)
                new = [torch.where(running, n, s) for n, s in zip(new, state, strict=True)]
                outputs[step] = new[0] * running
            else:
                outputs[step] = new[0]
            state = new
        return torch.stack(outputs), state

    def _step(self, inputs: Tensor, hidden: nn.Module, state: list[Tensor]) -> list[Tensor]:
        """One time step from the input product and the state: the new [h] or [h, c]."""
        h = state[0]
        if self.mode == "LSTM":
            gates = (inputs + hidden(h)).chunk(4, dim=1)
            i, f, o = (torch.sigmoid(g) for g in (gates[0], gates[1], gates[3]))
            c = f * state[1] + i * torch.tanh(gates[2])
            return [o * torch.tanh(c), c]
        if self.mode == "GRU":
            own = hidden(h)
            r_i, z_i, n_i = inputs.chunk(3, dim=1)
            r_h, z_h, n_h = own.chunk(3, dim=1)
            r, z = torch.sigmoid(r_i + r_h), torch.sigmoid(z_i + z_h)
            n = torch.tanh(n_i + r * n_h)
            return [(1 - z) * n + z * h]
        total = inputs + hidden(h)
        return [torch.tanh(total) if self.mode == "RNN_TANH" else torch.relu(total)]


def _packed(out: Tensor, packed: PackedSequence, lengths: Tensor) -> PackedSequence:
    """The padded output `out` (time, batch in the caller's order) packed as `packed` is."""
    order = packed.sorted_indices
    if order is not None:
        out, lengths = out.index_select(1, order), lengths[order]
    data = pack_padded_sequence(out, lengths.cpu(), enforce_sorted=True).data
    return PackedSequence(data, packed.batch_sizes, order, packed.unsorted_indices)


class QuantRNN(QuantRecurrent, nn.RNN):
    float_type = nn.RNN


class QuantGRU(QuantRecurrent, nn.GRU):
    float_type = nn.GRU


class QuantLSTM(QuantRecurrent, nn.LSTM):
    float_type = nn.LSTM


QUANTIZED: dict[type, type] = {nn.RNN: QuantRNN, nn.GRU: QuantGRU, nn.LSTM: QuantLSTM}
RECURRENT = tuple(cls.__name__ for cls in QUANTIZED)  # the layer type names: RNN, GRU, LSTM
