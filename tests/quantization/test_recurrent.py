"""Recurrent layers (nn.RNN, nn.GRU, nn.LSTM) are not quantized yet: they stay float, are never
taken for a Linear-like layer (a GRU once was, and its tuple output crashed the cost tables),
and the coverage line names each with its share of the weight MACs, counted by a formula that
torch's own FLOP counter confirms."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils.flop_counter import FlopCounterMode

import model_explorer
from model_explorer.cost.layers import recurrent_macs

LAYERS = {
    "rnn": lambda: nn.RNN(6, 10, batch_first=True),
    "gru, two layers": lambda: nn.GRU(6, 10, num_layers=2, batch_first=True),
    "lstm, bidirectional": lambda: nn.LSTM(6, 10, bidirectional=True),
    "lstm, projected, two layers": lambda: nn.LSTM(6, 10, num_layers=2, proj_size=4),
    "gru, bidirectional, two layers": lambda: nn.GRU(6, 8, num_layers=2, bidirectional=True),
}


@pytest.mark.filterwarnings("ignore:TF32 acceleration:UserWarning")
@pytest.mark.parametrize("name", list(LAYERS))
def test_the_formula_is_torchs_flop_count(name: str) -> None:
    """Half of torch's FlopCounterMode count over the layer's decomposed products (oneDNN's
    fused LSTM kernel turned off so that its matrix products are seen)."""
    torch.manual_seed(0)
    layer = LAYERS[name]().eval()
    x = torch.randn(7, 3, 6)  # (time, batch, features), or (batch, time, ...) where batch_first
    with (
        torch.no_grad(),
        torch.backends.mkldnn.flags(enabled=False),
        FlopCounterMode(display=False) as counter,
    ):
        layer(x)
    assert recurrent_macs(layer, x) * 2 == counter.get_total_flops()


def test_a_packed_sequence_counts_its_steps() -> None:
    layer = nn.GRU(6, 10)
    lengths = torch.tensor([7, 4, 2])
    packed = pack_padded_sequence(torch.randn(7, 3, 6), lengths)
    assert recurrent_macs(layer, packed) == int(lengths.sum()) * 3 * 10 * (6 + 10)


class Recurrent(nn.Module):
    def __init__(self, kind: type) -> None:
        super().__init__()
        self.rnn = kind(8, 16, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM, nn.RNN], ids=["gru", "lstm", "rnn"])
def test_a_recurrent_model_is_searched_and_its_float_layer_named(
    kind: type, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    data = [(torch.randn(20, 5, 8), torch.randint(0, 3, (20,))) for _ in range(2)]
    tiny = {"exploration": {"nsga": {"pop_size": 4, "offsprings": 4, "generations": 1}}}
    with caplog.at_level("WARNING"):
        found = model_explorer.search(
            Recurrent(kind).eval(), data=data, output=tmp_path / "r.pkl", settings=tiny
        )
    assert found.front
    quantized = found.model(found.front[0])
    assert list(quantized.layers) == ["head"]  # the recurrent layer left as it was
    assert type(quantized.model.rnn) is kind
    share = recurrent_macs(quantized.model.rnn, data[0][0]) / (
        recurrent_macs(quantized.model.rnn, data[0][0]) + 16 * 3 * 20
    )
    assert f"rnn ({kind.__name__}, {share:.1%})" in caplog.text
