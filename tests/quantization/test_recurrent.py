"""Recurrent layers (nn.RNN, nn.GRU, nn.LSTM) are quantized product by product: with the
quantizers off the open computation is torch's own kernel's, in every configuration torch
offers (layers, directions, projections, packed and unbatched inputs, given states); quantized,
an LSTM computes what torch's quantizable LSTM (torch.ao.nn.quantizable, a peer's decomposition
into the same products) computes when its products are quantized alike, GRU and RNN weights as
torch's kernel with those weights, and a GRU's quantized inputs and states as the documented
equations say. The MAC formula the cost tables use is torch's FLOP counter's; a subclass with a
forward of its own stays float and the coverage line names it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.ao.nn.quantizable import LSTM as QuantizableLSTM
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

import model_explorer
from model_explorer.cost.layers import measure_layers, recurrent_macs
from model_explorer.quantization import QuantizedModel
from model_explorer.quantization.coverage import weight_coverage
from model_explorer.quantization.recurrent import QuantRecurrent, RecurrentProduct

LAYERS = {
    "rnn": lambda: nn.RNN(6, 10, batch_first=True),
    "rnn relu, two layers": lambda: nn.RNN(6, 10, num_layers=2, nonlinearity="relu"),
    "gru, two layers": lambda: nn.GRU(6, 10, num_layers=2, batch_first=True),
    "lstm, bidirectional": lambda: nn.LSTM(6, 10, bidirectional=True),
    "lstm, projected, two layers": lambda: nn.LSTM(6, 10, num_layers=2, proj_size=4),
    "gru, bidirectional, two layers": lambda: nn.GRU(6, 8, num_layers=2, bidirectional=True),
    "lstm, no bias": lambda: nn.LSTM(6, 10, bias=False, batch_first=True),
}


class Last(nn.Module):
    """A recurrent layer's output sequence alone (what a QuantizedModel hands back)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.rnn = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rnn(x)[0]


def _sequence(layer: nn.RNNBase, batch: int = 3, steps: int = 7) -> torch.Tensor:
    shape = (batch, steps) if layer.batch_first else (steps, batch)
    return torch.randn(*shape, layer.input_size)


def _close(ours: object, theirs: object, tolerance: float = 1e-6) -> None:
    left, right = tree_flatten(ours)[0], tree_flatten(theirs)[0]
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a.float(), b.float(), atol=tolerance, rtol=0)


@pytest.mark.filterwarnings("ignore:LSTM with projections:UserWarning")
@pytest.mark.parametrize("name", list(LAYERS))
def test_with_its_quantizers_off_it_is_torchs_layer(name: str) -> None:
    """Outputs and final states of torch's kernel: a batch, a batch from given states, one
    unbatched sequence, and packed sequences of three lengths (zeros past each end)."""
    torch.manual_seed(0)
    layer = LAYERS[name]().eval()
    quantized = QuantizedModel(Last(copy.deepcopy(layer)))
    ours = quantized.model.rnn
    assert isinstance(ours, QuantRecurrent) and isinstance(ours, type(layer))
    quantized.set_enabled(False)
    x = _sequence(layer)
    states = [torch.randn_like(h) for h in tree_flatten(layer(x)[1])[0]]
    given = tuple(states) if isinstance(layer, nn.LSTM) else states[0]
    lengths = torch.tensor([7, 2, 5])
    packed = pack_padded_sequence(x, lengths, batch_first=layer.batch_first, enforce_sorted=False)
    one = x[0] if layer.batch_first else x[:, 0]
    with torch.no_grad():
        for args in ((x,), (x, given), (one,), (packed,)):
            _close(ours(*args), layer(*args))


def test_its_products_are_layers_that_own_no_parameter() -> None:
    layer = nn.LSTM(6, 10, num_layers=2, proj_size=4, bidirectional=True)
    before = layer.state_dict()
    quantized = QuantizedModel(Last(layer))
    assert list(quantized.layers) == [
        f"rnn.{kind}_l{n}{side}"
        for n in (0, 1)
        for side in ("", "_reverse")
        for kind in ("ih", "hh", "hr")
    ]
    product = quantized.layers["rnn.hh_l1_reverse"]
    assert isinstance(product, RecurrentProduct)
    assert product.weight is layer.weight_hh_l1_reverse and product.bias is layer.bias_hh_l1_reverse
    assert quantized.layers["rnn.hr_l0"].bias is None
    assert not list(product.parameters())
    assert type(quantized.restore().rnn) is nn.LSTM
    assert layer.state_dict().keys() == before.keys()


def _all_bits(quantized: QuantizedModel, bits: int) -> None:
    quantized.bit_widths = [bits] * len(quantized.bit_widths)


@pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:None of the submodule got qconfig:UserWarning")
@pytest.mark.parametrize(
    "config",
    [dict(), dict(num_layers=2, bidirectional=True), dict(batch_first=True, bias=False)],
    ids=["one layer", "two layers, bidirectional", "batch first, no bias"],
)
def test_a_quantized_lstm_is_torchs_quantizable_lstm_quantized_alike(config: dict) -> None:
    """torch.ao's quantizable LSTM runs each step as `igates(x) + hgates(h)` with two
    nn.Linear layers; quantizing those (our swap of nn.Linear) at 4 bits and our LSTM's
    `ih`/`hh` products at 4 bits gives the same outputs, calibrated on the same data."""
    torch.manual_seed(0)
    layer = nn.LSTM(6, 10, **config).eval()
    source = copy.deepcopy(layer)
    source.qconfig = None  # no observers: its products are nn.Linear layers, quantized by ours
    peer = QuantizableLSTM.from_float(source).eval()
    ours = QuantizedModel(Last(copy.deepcopy(layer)), layer_types=["LSTM"])
    theirs = QuantizedModel(Last(peer), layer_types=["Linear"])
    batches = [_sequence(layer) for _ in range(3)]
    for quantized in (ours, theirs):
        quantized.calibrate(batches, method="max")
        _all_bits(quantized, 4)
    assert len(ours.layers) == len(theirs.layers) == 2 * len(layer.all_weights)
    x = _sequence(layer)
    with torch.no_grad():
        got, expected, float_out = ours(x), theirs(x), layer(x)[0]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (got - float_out).abs().max() > 100 * 1e-5  # the quantization is visible


@pytest.mark.filterwarnings("ignore:LSTM with projections:UserWarning")
@pytest.mark.parametrize("name", list(LAYERS))
def test_quantized_weights_are_what_torchs_kernel_runs_with_those_weights(name: str) -> None:
    torch.manual_seed(0)
    layer = LAYERS[name]().eval()
    quantized = QuantizedModel(Last(copy.deepcopy(layer)))
    _all_bits(quantized, 3)
    quantized.set_enabled(False, [n for n in quantized.quantizers if n.endswith("input_quantizer")])
    with torch.no_grad():
        for product in quantized.layers.values():
            getattr(layer, f"weight_{product.product}").copy_(product.quantized_weight())
        x = _sequence(layer)
        _close(quantized(x), layer(x)[0])


def _fake(x: torch.Tensor, bits: int, amax: float) -> torch.Tensor:
    """Symmetric fake quantization, torch's own operator, as REFERENCE's formula says."""
    bound = 2 ** (bits - 1) - 1
    return torch.fake_quantize_per_tensor_affine(x, amax / bound, 0, -bound - 1, bound)


def test_a_gru_quantizes_its_inputs_and_states_as_the_documented_equations() -> None:
    """torch.nn.GRU's documented step with the products' operands fake-quantized (the input
    with the `ih` amax, the previous state with the `hh` amax) and the update in float."""
    torch.manual_seed(0)
    layer = nn.GRU(6, 10).eval()
    quantized = QuantizedModel(Last(copy.deepcopy(layer)))
    quantized.calibrate([_sequence(layer) for _ in range(2)], method="max")
    _all_bits(quantized, 4)
    quantized.set_enabled(
        False, [n for n in quantized.quantizers if n.endswith("weight_quantizer")]
    )
    amax = {n: float(q.amax) for n, q in quantized.quantizers.items() if q.amax is not None}
    x = _sequence(layer)
    h = torch.zeros(3, 10)
    outputs = []
    with torch.no_grad():
        for step in x:
            gi = nn.functional.linear(
                _fake(step, 4, amax["rnn.ih_l0.input_quantizer"]),
                layer.weight_ih_l0,
                layer.bias_ih_l0,
            )
            gh = nn.functional.linear(
                _fake(h, 4, amax["rnn.hh_l0.input_quantizer"]), layer.weight_hh_l0, layer.bias_hh_l0
            )
            r = torch.sigmoid(gi[:, :10] + gh[:, :10])
            z = torch.sigmoid(gi[:, 10:20] + gh[:, 10:20])
            n = torch.tanh(gi[:, 20:] + r * gh[:, 20:])
            h = (1 - z) * n + z * h
            outputs.append(h)
        torch.testing.assert_close(quantized(x), torch.stack(outputs), atol=1e-6, rtol=0)


@pytest.mark.filterwarnings("ignore:TF32 acceleration:UserWarning")
@pytest.mark.filterwarnings("ignore:LSTM with projections:UserWarning")
@pytest.mark.parametrize("name", list(LAYERS))
def test_the_formula_is_torchs_flop_count_and_the_products_add_up_to_it(name: str) -> None:
    """Half of torch's FlopCounterMode count over the layer's decomposed products (oneDNN's
    fused LSTM kernel turned off so that its matrix products are seen); the cost table's
    products of the quantized layer add up to the same."""
    torch.manual_seed(0)
    layer = LAYERS[name]().eval()
    x = torch.randn(7, 7, 6)  # (time, batch, ...) or (batch, time, ...): 7 samples either way
    with (
        torch.no_grad(),
        torch.backends.mkldnn.flags(enabled=False),
        FlopCounterMode(display=False) as counter,
    ):
        layer(x)
    assert recurrent_macs(layer, x) * 2 == counter.get_total_flops()
    quantized = QuantizedModel(Last(layer))
    quantized.set_enabled(False)
    costs = measure_layers(quantized, x, quantized.layers)
    assert sum(cost.macs for cost in costs.values()) * 7 == recurrent_macs(layer, x)


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


class OwnLSTM(nn.LSTM):
    """A subclass with a forward of its own: no one knows what it computes."""

    def forward(self, x: torch.Tensor, hx: object = None) -> tuple:  # type: ignore[override]
        out, state = super().forward(x, hx)
        return out * 0.5, state


TINY = {"exploration": {"nsga": {"pop_size": 4, "offsprings": 4, "generations": 1}}}


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM, nn.RNN], ids=["gru", "lstm", "rnn"])
def test_a_recurrent_model_is_searched_with_each_product_a_layer(
    kind: type, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    data = [(torch.randn(20, 5, 8), torch.randint(0, 3, (20,))) for _ in range(2)]
    with caplog.at_level("WARNING"):
        found = model_explorer.search(
            Recurrent(kind).eval(), data=data, output=tmp_path / "r.pkl", settings=TINY
        )
    assert found.front
    quantized = found.model(found.front[0])
    assert list(quantized.layers) == ["rnn.ih_l0", "rnn.hh_l0", "head"]
    coverage = weight_coverage(quantized, lambda: quantized(data[0][0]))
    assert coverage.float_layers == [] and coverage.quantized_macs == coverage.total_macs > 0
    assert "in float" not in caplog.text


def test_a_recurrent_subclass_with_its_own_forward_stays_float_and_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM)
    model.rnn = OwnLSTM(8, 16, batch_first=True)
    data = [(torch.randn(20, 5, 8), torch.randint(0, 3, (20,))) for _ in range(2)]
    with caplog.at_level("WARNING"):
        found = model_explorer.search(
            model.eval(), data=data, output=tmp_path / "r.pkl", settings=TINY
        )
    quantized = found.model(found.front[0])
    assert list(quantized.layers) == ["head"]
    assert type(quantized.model.rnn) is OwnLSTM
    macs = recurrent_macs(quantized.model.rnn, data[0][0])
    share = macs / (macs + 16 * 3 * 20)
    assert f"rnn (OwnLSTM, {share:.1%})" in caplog.text


def test_a_quantized_lstm_exports_unrolled_and_onnxruntime_agrees(tmp_path: Path) -> None:
    """The export unrolls the time steps (a fixed sequence length); the hidden product's nodes
    of later steps are named `rnn.hh_l0/call_<n>`, unique, and onnxruntime computes what the
    fake-quantized model computes."""
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    torch.manual_seed(0)
    data = [(torch.randn(20, 5, 8), torch.randint(0, 3, (20,))) for _ in range(2)]
    found = model_explorer.search(
        Recurrent(nn.LSTM).eval(), data=data, output=tmp_path / "r.pkl", settings=TINY
    )
    member = found.front[0]
    path = found.export(member, tmp_path / "lstm.onnx")
    names = [node.name for node in onnx.load(path).graph.node]
    assert len(names) == len(set(names))
    assert "rnn.hh_l0" in names and "rnn.hh_l0/call_4" in names
    session = ort.InferenceSession(str(path))
    x = data[1][0]
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    with torch.no_grad():
        expected = found.model(member)(x)
    torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-5, rtol=0)


def test_debug_measures_the_hidden_product_over_every_step(tmp_path: Path) -> None:
    """The hidden product runs once per time step: its local SQNR is over the inputs of every
    step (taken here by a plain forward pre-hook and quantized by torch's own operator), in
    PyTorch and in onnxruntime on the unrolled export, not over the first step's zero state."""
    pytest.importorskip("onnxruntime")
    from model_explorer.analysis.debug.api import debug_search

    torch.manual_seed(0)
    data = [(torch.randn(20, 5, 8), torch.randint(0, 3, (20,))) for _ in range(2)]
    found = model_explorer.search(
        Recurrent(nn.LSTM).eval(), data=data, output=tmp_path / "r.pkl", settings=TINY
    )
    member = found.front[0]
    report = debug_search(found, member, samples=20)
    row = next(r for r in report.rows if r["layer"] == "rnn.hh_l0")
    quantized = found.model(member)
    quantizer = quantized.quantizers["rnn.hh_l0.input_quantizer"]
    seen: list[torch.Tensor] = []
    hook = quantized.layers["rnn.hh_l0"].register_forward_pre_hook(
        lambda _, args: seen.append(args[0].clone())
    )
    with torch.no_grad():
        quantized(data[0][0])
    hook.remove()
    steps = torch.cat(seen)
    assert len(seen) == 5 and steps.abs().max() > 0
    expected = _fake(steps, quantizer.num_bits, float(quantizer.amax))
    db = 20 * torch.log10(steps.norm() / (steps - expected).norm())
    assert row["local_db"] == pytest.approx(float(db), abs=0.01)
    assert row["onnxruntime_local_db"] == pytest.approx(float(db), abs=0.1)


def test_include_and_exclude_choose_products_by_their_names() -> None:
    """`exclude: [rnn.hh_*]` leaves the hidden products float (their quantizers off, no gene);
    excluding every product leaves the layer as it was."""
    torch.manual_seed(0)
    layer = nn.LSTM(6, 10, num_layers=2)
    quantized = QuantizedModel(Last(copy.deepcopy(layer)), exclude=["rnn.hh_*"])
    assert list(quantized.layers) == ["rnn.ih_l0", "rnn.ih_l1"]
    hidden = quantized.model.rnn.hh_l1
    assert not hidden.input_quantizer.enabled and not hidden.weight_quantizer.enabled
    x = _sequence(layer)
    quantized.calibrate([x], method="max")
    _all_bits(quantized, 3)
    reference = QuantizedModel(Last(copy.deepcopy(layer)))
    reference.calibrate([x], method="max")
    _all_bits(reference, 3)
    reference.set_enabled(False, [n for n in reference.quantizers if ".hh_" in n])
    with torch.no_grad():
        torch.testing.assert_close(quantized(x), reference(x), atol=0, rtol=0)
    untouched = Recurrent(nn.LSTM)
    assert list(QuantizedModel(untouched, exclude=["rnn.*"]).layers) == ["head"]
    assert type(untouched.rnn) is nn.LSTM
