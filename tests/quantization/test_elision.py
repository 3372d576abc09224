"""Activations skipped while a candidate is scored (quantization/elision.py): which calls the
dataflow lets go, counted by hand on a network holding every case and on torchvision's
MobileNetV2, and the outputs with and without skipping compared bit for bit: the model that
runs every activation is the reference, and a planted wrong rule shows the comparison fails."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from model_explorer.problems.base import ModelProblem
from model_explorer.problems.options import QuantizationOptions
from model_explorer.problems.quantization import LayerwiseQuantizationProblem
from model_explorer.quantization import QuantizedModel
from model_explorer.quantization import elision as elision_module
from model_explorer.quantization.elision import ActivationElision
from model_explorer.quantization.spec import QuantizerSpec
from tests_support import calibrated_digits


@pytest.fixture(autouse=True)
def integer_kernel_at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The integer kernel takes tensors of every size here (searches leave those below
    kernels.INTEGER_SMALLEST values to the eager steps): these tests are about the kernel."""
    from model_explorer.formats import kernels as _kernels

    monkeypatch.setattr(_kernels, "INTEGER_SMALLEST", 0)


class EveryCase(nn.Module):
    """Calls skipped (read only by quantized layers): `relu6` (by `b`), the first call of
    `shared` (by `c`), `fork` (by `f` and `g`). Kept: the second call of `shared` (read by `d`
    and by an addition), `in_place` (its input is read by `e` too), `before_pool` (read by a
    pooling)."""

    def __init__(self) -> None:
        super().__init__()
        conv = lambda k: nn.Conv2d(8, 8, k, padding=k // 2)  # noqa: E731
        self.a, self.b, self.c, self.d = nn.Conv2d(3, 8, 3, padding=1), conv(3), conv(3), conv(1)
        self.e, self.f, self.g, self.h = conv(1), conv(1), conv(1), conv(3)
        self.relu6, self.shared, self.fork = nn.ReLU6(), nn.ReLU(), nn.ReLU()
        self.in_place, self.before_pool = nn.ReLU(inplace=True), nn.ReLU()
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(self.relu6(self.a(x)))
        w = self.shared(self.c(self.shared(y)) + y)
        u = self.d(w) + w
        v = self.h(u)
        s = self.f(self.in_place(v)) + self.e(v)
        k = self.fork(s)
        m = self.f(k) + self.g(k)
        return self.head(F.adaptive_avg_pool2d(self.before_pool(m), 1).flatten(1))


def quantized(model: nn.Module, batch: torch.Tensor) -> QuantizedModel:
    wrapped = QuantizedModel(model.eval(), input=QuantizerSpec(unsigned="auto"))
    wrapped.calibrate([batch], method="max")
    return wrapped


def outputs_with_and_without(model: QuantizedModel, x: torch.Tensor) -> tuple:
    """The output with every activation, then skipping (after the first pass, which checks the
    trace's calls), twice; and the calls skipped per pass."""
    elision = ActivationElision(model.model, smallest=0)
    with torch.no_grad():
        reference = model(x)
        with elision.applied() as skipped:
            assert torch.equal(model(x), reference)  # counted only
            assert elision.verified is (skipped > 0 or None)
            elided = model(x)
            again = model(x)  # the calls are counted within each pass
    return reference, elided, again, skipped


def test_calls_read_only_by_quantized_layers_are_skipped_with_the_same_outputs() -> None:
    torch.manual_seed(0)
    model = quantized(EveryCase(), torch.randn(8, 3, 8, 8))
    for bits in ([8] * 18, [random.Random(1).randint(2, 8) for _ in range(18)]):
        model.bit_widths = bits
        x = torch.randn(4, 3, 8, 8) * 20  # past every amax: the quantizers clamp
        reference, elided, again, skipped = outputs_with_and_without(model, x)
        assert skipped == 3
        assert torch.equal(elided, reference) and torch.equal(again, reference)
    sites = {id(site.module): site for site in ActivationElision(model.model).sites}
    inner = model.model
    assert id(inner.in_place) not in sites and id(inner.before_pool) not in sites
    assert [entry is not None for entry in sites[id(inner.shared)].readers] == [True, False]


def test_every_format_takes_the_activation_over_and_a_disabled_quantizer_keeps_it() -> None:
    """`b`'s quantizer clamping at 8 (the ReLU6 before it at 6), in the block formats, in FP8,
    signed, asymmetric: each is given the ReLU6's bounds and the call is skipped with the same
    outputs, bit for bit; a disabled quantizer (the layer in float) keeps it."""
    x = torch.randn(4, 3, 8, 8) * 20
    changes = [
        lambda quantizer: quantizer.fix_amax(8.0),
        lambda quantizer: setattr(quantizer, "format", "mxfp8"),
        lambda quantizer: setattr(quantizer, "format", "mxfp4"),
        lambda quantizer: setattr(quantizer, "format", "nvfp4"),
        lambda quantizer: setattr(quantizer, "format", "fp8_e4m3"),
        lambda quantizer: setattr(quantizer, "format", "int4_g16"),
        lambda quantizer: setattr(quantizer, "unsigned", False),
        lambda quantizer: setattr(quantizer, "asymmetric", True),
        lambda quantizer: setattr(quantizer, "enabled", False),
    ]
    for number, change in enumerate(changes):
        torch.manual_seed(0)
        network = EveryCase()
        with torch.no_grad():
            network.a.weight.mul_(10)  # the ReLU6 clamps many of its inputs
        model = quantized(network, torch.randn(8, 3, 8, 8))
        change(model.layers["b"].input_quantizer)
        reference, elided, again, skipped = outputs_with_and_without(model, x)
        assert skipped == (2 if number == len(changes) - 1 else 3)
        assert torch.equal(elided, reference) and torch.equal(again, reference)
        assert model.layers["b"].input_quantizer.bounds is None  # taken back


def test_a_layer_called_twice_is_given_no_bounds() -> None:
    """`f` reads `fork`'s output and, in another call, `in_place`'s: bounds would clamp both.
    In MXFP8 it keeps `fork`; `g`, called once, in MXFP8 does not."""
    torch.manual_seed(0)
    model = quantized(EveryCase(), torch.randn(8, 3, 8, 8))
    x = torch.randn(4, 3, 8, 8) * 20
    for name, expected in (("f", 2), ("g", 3)):
        quantizer = model.layers[name].input_quantizer
        quantizer.format = "mxfp8"
        reference, elided, _, skipped = outputs_with_and_without(model, x)
        assert skipped == expected and torch.equal(elided, reference)
        quantizer.num_bits = 8  # the integer format again


def test_a_wrong_rule_changes_the_outputs(monkeypatch) -> None:
    """The planted faults: were a ReLU6 taken to clamp no lower than a ReLU, the call before a
    quantizer whose amax is 8 would be skipped with bounds (0, Inf) and the values between 6
    and 8 would pass; were the bounds not given, the negative values would pass too."""
    torch.manual_seed(0)
    network = EveryCase()
    with torch.no_grad():
        network.a.weight.mul_(10)  # the ReLU6 clamps many of its inputs
    model = quantized(network, torch.randn(8, 3, 8, 8))
    model.layers["b"].input_quantizer.fix_amax(8.0)
    x = torch.randn(4, 3, 8, 8)
    reference, elided, _, skipped = outputs_with_and_without(model, x)
    assert skipped == 3 and torch.equal(elided, reference)
    with monkeypatch.context() as patch:
        patch.setitem(elision_module.ELIDABLE, nn.ReLU6, float("inf"))
        reference, elided, _, skipped = outputs_with_and_without(model, x)
        assert skipped == 3
        assert not torch.equal(elided, reference)
    model.layers["b"].input_quantizer.format = "mxfp8"
    monkeypatch.setattr(elision_module, "_bind", lambda sites: None)
    reference, elided, _, skipped = outputs_with_and_without(model, x)
    assert skipped == 3
    assert not torch.equal(elided, reference)


def test_mobilenet_v2_skips_every_relu6_but_the_one_before_the_pooling() -> None:
    """torchvision's MobileNetV2: 35 ReLU6 calls, in the stem, in the first block's depthwise
    convolution and in the expansion and depthwise convolutions of the 16 others, then before
    the average pooling; each of the first 34 is read by one convolution only, skipped in bit
    widths and in block and FP8 formats alike."""
    torch.manual_seed(0)
    network = torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.5)
    for module in network.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None  # statistics of the batch below: activations keep their scale
    x = torch.randn(4, 3, 64, 64)
    with torch.no_grad():
        network.train()(torch.randn(8, 3, 64, 64))
    model = quantized(network, x)
    model.bit_widths = [random.Random(2).randint(3, 8) for _ in model.bit_widths]
    reference, elided, again, skipped = outputs_with_and_without(model, x)
    assert skipped == 34
    assert torch.equal(elided, reference) and torch.equal(again, reference)
    # The input quantizers in formats that do not clamp as a ReLU6 does: each given the bounds.
    formats = ["mxfp8", "mxfp6_e2m3", "nvfp4", "fp8_e4m3", "int4_g16"]
    for index, layer in enumerate(model.layers.values()):
        layer.input_quantizer.format = formats[index % len(formats)]
    reference, elided, again, skipped = outputs_with_and_without(model, x)
    assert skipped == 34
    assert torch.equal(elided, reference) and torch.equal(again, reference)


class Passing(nn.Module):
    """Skipped: `to_linear` (through a view whose size comes from the tensor). Kept: `to_conv`
    (a max pooling, which commutes with a ReLU but costs more on the values left signed),
    `to_indices` (a max pooling that returns indices too), `to_average` (an average pooling,
    which does not commute with a ReLU)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.c, self.d = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.to_conv, self.to_indices, self.to_average = nn.ReLU(), nn.ReLU(), nn.ReLU()
        self.to_linear = nn.ReLU()
        self.pool, self.pick = nn.MaxPool2d(2), nn.MaxPool2d(2, return_indices=True)
        self.average = nn.AvgPool2d(2)
        self.head = nn.Linear(8 * 2 * 2, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.b(self.pool(self.to_conv(self.a(x))))  # 8x8 -> 4x4
        picked, _ = self.pick(self.to_indices(self.c(y)))  # 2x2
        z = self.d(self.average(self.to_average(y))) + picked
        z = self.to_linear(z)
        return self.head(z.view(z.size(0), -1))


def test_activations_pass_through_views_to_the_quantizers_not_through_pooling(monkeypatch) -> None:
    torch.manual_seed(0)
    model = quantized(Passing(), torch.randn(8, 3, 8, 8))
    model.bit_widths = [random.Random(4).randint(3, 8) for _ in model.bit_widths]
    x = torch.randn(4, 3, 8, 8) * 5
    reference, elided, again, skipped = outputs_with_and_without(model, x)
    assert skipped == 1
    assert torch.equal(elided, reference) and torch.equal(again, reference)
    # The planted fault: were an average pooling taken to commute with a ReLU too, the call
    # before it would be skipped and the negative values averaged in.
    monkeypatch.setattr(elision_module, "_PASSING_MODULES", (nn.AvgPool2d,))
    reference, elided, _, skipped = outputs_with_and_without(model, x)
    assert skipped == 2
    assert not torch.equal(elided, reference)


def test_squeezenet_skips_the_squeeze_activations_and_keeps_those_before_pooling() -> None:
    """torchvision's SqueezeNet 1.0: 26 ReLU calls (the stem's, three in each of 8 Fire
    modules, the classifier's). Skipped: each Fire's squeeze activation (read by both expand
    convolutions). Kept: the stem's (read by a max pooling), the expand activations
    (concatenated) and the classifier's (an average pooling)."""
    torch.manual_seed(0)
    network = torchvision.models.squeezenet1_0(num_classes=10)
    x = torch.randn(2, 3, 64, 64)
    model = quantized(network, x)
    model.bit_widths = [random.Random(5).randint(3, 8) for _ in model.bit_widths]
    reference, elided, again, skipped = outputs_with_and_without(model, x)
    assert skipped == 8
    assert torch.equal(elided, reference) and torch.equal(again, reference)


def test_a_model_torch_fx_cannot_trace_keeps_every_activation() -> None:
    class Branching(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.relu, self.b = nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.relu(self.a(x))
            return self.b(y) if bool(y.sum() > 0) else -self.b(y)

    model = quantized(Branching(), torch.randn(8, 4))
    reference, elided, _, skipped = outputs_with_and_without(model, torch.randn(8, 4))
    assert skipped == 0 and torch.equal(elided, reference)


def test_a_subclass_of_relu_keeps_its_own_forward() -> None:
    """A subclass may compute more than its base (here twice the ReLU, which no quantizer's
    clamp stands in for): kept, and counted out of the skipped calls."""

    class Doubled(nn.ReLU):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.relu(x) * 2

    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), Doubled(), nn.Linear(8, 2))
    model = quantized(network, torch.randn(16, 4))
    reference, elided, _, skipped = outputs_with_and_without(model, torch.randn(8, 4))
    assert skipped == 1 and torch.equal(elided, reference)


class OptionalArgument(nn.Module):
    """torch.fx traces `extra` as given, so its trace calls `relu` twice; a pass without it
    calls it once."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)
        self.relu, self.last = nn.ReLU(), nn.ReLU()

    def forward(self, x: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        y = self.b(self.relu(self.a(x)))
        if extra is not None:
            y = self.b(self.relu(y + extra))
        return self.c(self.last(y))


def test_a_pass_that_is_not_the_traced_one_keeps_or_stops_the_skipping() -> None:
    torch.manual_seed(0)
    model = quantized(OptionalArgument(), torch.randn(16, 4))
    x, extra = torch.randn(8, 4), torch.randn(8, 8)
    with torch.no_grad():
        reference = model(x)
        elision = ActivationElision(model.model, smallest=0)
        with elision.applied() as skipped:  # the first pass is not the trace's: nothing skipped
            assert skipped == 3
            assert torch.equal(model(x), reference) and elision.verified is False
            assert torch.equal(model(x), reference)
        with_extra = model(x, extra=extra)
        confirmed = ActivationElision(model.model, smallest=0)
        with pytest.raises(RuntimeError, match="differ from the trace"):
            with confirmed.applied():
                assert torch.equal(model(x, extra=extra), with_extra)  # the trace's calls
                assert torch.equal(model(x, extra=extra), with_extra) and confirmed.verified
                model(x)  # one call of `relu` where two were traced, skipped by the wrong index


def test_the_first_pass_counts_the_activations_no_candidate_skips_yet() -> None:
    """The first candidate skips only `last` (`b`'s quantizer off); `relu`, whose calls are
    not the trace's without `extra`, is counted too, so that a later candidate skipping it
    finds the trace refused instead of skipping by the wrong index."""
    torch.manual_seed(0)
    model = quantized(OptionalArgument(), torch.randn(16, 4))
    x = torch.randn(8, 4)
    with torch.no_grad():
        reference = model(x)
        elision = ActivationElision(model.model, smallest=0)
        model.layers["b"].input_quantizer.enabled = False
        with elision.applied() as skipped:
            assert skipped == 1 and torch.equal(model(x), model(x))
        assert elision.verified is False
        model.layers["b"].input_quantizer.enabled = True
        with elision.applied():
            assert torch.equal(model(x), reference) and torch.equal(model(x), reference)


@pytest.fixture(scope="module")
def digits(trained_digits, tmp_path_factory):
    return calibrated_digits(trained_digits, tmp_path_factory.mktemp("elision"))


def test_the_search_scores_candidates_as_the_model_with_every_activation(digits) -> None:
    """The default workload's digits CNN (batch norms folded): the ReLU after the first
    convolution feeds the second, the one after the first linear layer the last; the one
    after the second convolution feeds a max pooling, the one after the third an average
    pooling. A candidate's score is the same as with every activation run, in bit widths
    and in formats (the quantizers given the ReLUs' bounds). With the default
    `smallest` nothing is skipped: the two calls hold 120 x 16 x 8 x 8 + 120 x 64 values a
    pass, under 2**20."""
    context, model = digits
    formats = ["int4", "int4_g16", "mxfp4", "nvfp4", "mxfp6_e2m3", "int8", "fp8_e4m3"]
    for choices in (None, formats):  # widths, then formats: every call skipped, bounds given
        options = QuantizationOptions(early_reject=False, choices=choices)
        problem = LayerwiseQuantizationProblem(
            model, context.batches("exploration"), options=options
        )
        rng = random.Random(3)
        for smallest, expected in ((0, 2), (elision_module.SKIP_SMALLEST, 0)):
            problem.elision.smallest = smallest
            for _ in range(4):
                genome = [rng.randint(v.lower, v.upper) for v in problem.variables]
                problem.apply_plan(problem.plan(problem.decode(genome)))
                with problem.elision.applied() as skipped:
                    pass
                assert skipped == expected
                assert problem.score() == ModelProblem.score(problem)


def test_calls_are_skipped_only_where_they_hold_the_smallest_values_a_pass() -> None:
    """EveryCase's three calls skipped hold 3 x 4 x 8 x 8 x 8 values a pass (a batch of 4):
    skipped with `smallest` that many, kept with one more; the first pass counts them."""
    torch.manual_seed(0)
    model = quantized(EveryCase(), torch.randn(8, 3, 8, 8))
    x = torch.randn(4, 3, 8, 8) * 20
    values = 3 * 4 * 8 * 8 * 8
    for smallest, expected in ((values, 3), (values + 1, 0)):
        elision = ActivationElision(model.model, smallest=smallest)
        with torch.no_grad(), elision.applied() as first:
            model(x)  # counted
            live = [site.live for site in elision.sites]
        assert first == 3 and elision.verified is True
        assert any(live) is (expected > 0)
        with torch.no_grad(), elision.applied() as skipped:
            assert skipped == expected
            model(x)
        calls = {id(s.module): s.sizes for s in elision.sites}
        assert calls[id(model.model.relu6)] == [4 * 8 * 8 * 8]


def overwritten(model: QuantizedModel, x: torch.Tensor) -> dict[str, bool]:
    """Per quantized layer, whether its input quantizer wrote its result over its input in a
    pass skipping the activations (the second pass: the first checks the trace)."""
    found: dict[str, bool] = {}
    hooks = [
        layer.input_quantizer.register_forward_hook(
            lambda module, inputs, output, name=name: found.__setitem__(
                name, output.data_ptr() == inputs[0].data_ptr()
            )
        )
        for name, layer in model.layers.items()
    ]
    elision = ActivationElision(model.model, smallest=0)
    try:
        with torch.no_grad(), elision.applied():
            model(x)
            model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return found


@pytest.mark.kernels
def test_a_quantizer_writes_over_an_input_nothing_else_reads() -> None:
    """`b` reads `relu6`'s output, whose input, `a`'s product, nothing else reads: with the
    ReLU6 skipped, `b`'s quantizer writes over it, and the outputs are the reference's. The
    other skipped calls' inputs are read by more than one reader (`shared`'s input by the
    addition, `fork`'s output by `f` and `g`): their quantizers write results of their own.
    Off again after the candidate, and not where a hook could keep the tensor."""
    torch.manual_seed(0)
    model = quantized(EveryCase(), torch.randn(8, 3, 8, 8))
    x = torch.randn(4, 3, 8, 8) * 20
    reference, elided, again, skipped = outputs_with_and_without(model, x)
    assert skipped == 3 and torch.equal(elided, reference) and torch.equal(again, reference)
    found = overwritten(model, x)
    assert [name for name, over in found.items() if over] == ["b"]
    assert not any(layer.input_quantizer.overwrites for layer in model.layers.values())
    kept = []  # a hook that keeps `a`'s product: then it is not written over
    hook = model.layers["a"].register_forward_hook(lambda *args: kept.append(args[2]))
    found = overwritten(model, x)
    hook.remove()
    with torch.no_grad():
        assert not any(found.values()) and torch.equal(kept[-1], model.layers["a"](x))


class OnTheInput(nn.Module):
    """A ReLU on the model's input, one on a view of a product, one on a product (the only
    input a quantizer may write over)."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 8 * 8, 16)
        self.third, self.last = nn.Linear(16, 16), nn.Linear(16, 4)
        self.on_input, self.on_view, self.on_product = nn.ReLU(), nn.ReLU(), nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.first(self.on_input(x))
        z = self.second(self.on_view(y.flatten(1)))
        return self.last(self.on_product(self.third(z)))


@pytest.mark.kernels
def test_no_quantizer_writes_over_the_models_input_or_a_view(monkeypatch) -> None:
    """The batch a search scores stays as it was: `first` reads a ReLU of the model's input
    and `second` a ReLU of a view, both skipped, neither written over; `last` reads a ReLU of
    `third`'s product, written over. A planted rule that lets any input be written over
    changes the batch."""
    torch.manual_seed(0)
    model = quantized(OnTheInput(), torch.randn(16, 3, 8, 8))
    x = torch.randn(4, 3, 8, 8)
    kept = x.clone()
    reference, elided, _, skipped = outputs_with_and_without(model, x)
    assert skipped == 3 and torch.equal(elided, reference) and torch.equal(x, kept)
    assert overwritten(model, x) == {"first": False, "second": False, "third": False, "last": True}
    assert torch.equal(x, kept)

    def any_reader(model, node):  # noqa: ANN001, ANN202 - the planted rule
        (user,) = node.users
        return model.get_submodule(user.target), None

    monkeypatch.setattr(elision_module, "sole_reader", any_reader)
    assert overwritten(model, x)["first"] and not torch.equal(x, kept)
