"""A quantizer in another format than the integer one replays its last kernel call on the next
tensor of the same shape (kernels.Replay): the values of the format's own call, bit for bit,
on hard values; never where the amax, bounds, shape, placement or format it was worked out
from changed, where the kernels are off or watched, or where a gradient is needed."""

from __future__ import annotations

import ctypes
import gc
import os

import pytest
import torch
from format_values import Watching, hard_values, same_bits

from model_explorer.formats import kernels, parse_format
from model_explorer.formats.blocks import mx_fake_quantize
from model_explorer.formats.elements import ELEMENTS
from model_explorer.formats.families import NoOptions
from model_explorer.formats.registry import FORMATS as REGISTRY
from model_explorer.formats.registry import FormatFamily
from model_explorer.native import ENVIRONMENT_SWITCH
from model_explorer.quantization.quantizer import TensorQuantizer

# the kernels' own values and calls: skipped with the kernels off (tests/conftest.py)
pytestmark = pytest.mark.kernels

FORMATS = [
    "fp8_e4m3",
    "fp8_e5m2",
    "mxfp8",
    "mxfp6_e2m3",
    "mxfp6_e3m2",
    "mxfp4",
    "mxint8",
    "nvfp4",
    "int4_g16",
    "int4_g128",
]
SHAPE = (120, 16, 8, 8)  # a digits model's activation, blocks across its channels


@pytest.fixture
def replays(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The tensors each replay was called on, in turn."""
    calls: list[torch.Tensor] = []
    original = kernels.Replay.__call__

    def counted(self: kernels.Replay, x: torch.Tensor) -> torch.Tensor:
        calls.append(x)
        return original(self, x)

    monkeypatch.setattr(kernels.Replay, "__call__", counted)
    return calls


def _quantizer(name: str, amax: float = 5.0, bounds: tuple[float, float] | None = None):  # noqa: ANN202
    quantizer = TensorQuantizer(8)
    quantizer.amax = amax
    quantizer.block_axis = 1
    quantizer.format = parse_format(name)
    quantizer.bounds = bounds
    return quantizer


def _activations(seed: int, scale: float = 1.0) -> torch.Tensor:
    values = hard_values(4.0).reshape(-1)
    generator = torch.Generator().manual_seed(seed)
    start = int(torch.randint(0, values.numel() - 122_880, (1,), generator=generator))
    return values[start : start + 122_880].reshape(SHAPE) * scale


def _own_call(quantizer: TensorQuantizer, x: torch.Tensor) -> torch.Tensor:
    """The format's own call, as the quantizer makes it when it has nothing to replay."""
    chosen = quantizer._format
    return chosen.quantize(x, quantizer.format_amax(), quantizer.placement, quantizer.bounds)


@pytest.mark.parametrize("bounds", [None, (0.0, 6.0)], ids=["unbounded", "bounded"])
@pytest.mark.parametrize("name", FORMATS)
def test_a_replayed_call_gives_the_formats_values(name: str, bounds, replays) -> None:  # noqa: ANN001
    quantizer = _quantizer(name, bounds=bounds)
    with torch.inference_mode():
        first = _activations(0)
        assert same_bits(quantizer(first), _own_call(quantizer, first).numpy())
        assert replays == []
        for seed in (1, 2):
            x = _activations(seed, scale=seed * 3.0)
            out = quantizer(x)
            assert replays[-1] is x
            assert out.data_ptr() != x.data_ptr() and out.is_contiguous()
            assert same_bits(out, _own_call(quantizer, x).numpy())
    assert len(replays) == 2


@pytest.mark.parametrize("name", ["fp8_e4m3", "nvfp4"])
def test_an_amax_changed_even_in_place_is_read_again(name: str, replays) -> None:  # noqa: ANN001
    """The replay's numbers depend on the amax: set anew, or changed in the tensor itself
    (which keeps the quantizer's other cached numbers), the next call is worked out again."""
    quantizer = _quantizer(name, amax=5.0)
    x = _activations(1)
    with torch.inference_mode():
        quantizer(x), quantizer(x)
        assert len(replays) == 1
        quantizer.amax.mul_(0.25)
        assert same_bits(quantizer(x), _own_call(quantizer, x).numpy())
        quantizer.amax = 40.0
        assert same_bits(quantizer(x), _own_call(quantizer, x).numpy())
    assert len(replays) == 1
    assert float(quantizer.amax) == 40.0


def test_each_shape_bounds_format_and_placement_has_its_own_replay(replays) -> None:  # noqa: ANN001
    quantizer = _quantizer("mxfp4")
    x = _activations(3)
    settings = [
        lambda: None,
        lambda: setattr(quantizer, "bounds", (0.0, 2.0)),
        lambda: setattr(quantizer, "block_axis", -1),
        lambda: setattr(quantizer, "format", parse_format("mxfp6_e2m3")),
    ]
    with torch.inference_mode():
        for change in settings:
            change()
            quantizer(x)  # worked out
            assert same_bits(quantizer(x), _own_call(quantizer, x).numpy())  # replayed
        smaller = x[:7].clone()  # a last, smaller batch
        assert same_bits(quantizer(smaller), _own_call(quantizer, smaller).numpy())
    assert len(replays) == len(settings)


def test_no_replay_with_the_kernels_off_watched_or_a_gradient(replays) -> None:  # noqa: ANN001
    quantizer = _quantizer("nvfp4")
    x = _activations(4)
    with torch.inference_mode():
        quantizer(x)
        os.environ[ENVIRONMENT_SWITCH] = "0"
        try:
            off = quantizer(x)
        finally:
            del os.environ[ENVIRONMENT_SWITCH]
        with Watching():
            watched = quantizer(x)
        expected = _own_call(quantizer, x)
    assert same_bits(off, expected.numpy()) and same_bits(watched, expected.numpy())
    trained = x.clone().requires_grad_()
    quantizer(trained).sum().backward()  # the straight-through gradient
    assert torch.equal(trained.grad, torch.ones_like(x))
    assert replays == []


def test_only_one_kernel_call_from_the_tensor_into_the_result_is_recorded() -> None:
    x = _activations(5)
    amax = torch.tensor(5.0)
    chosen, placement = parse_format("mxfp4"), _quantizer("mxfp4").placement
    with torch.inference_mode():
        single = kernels.recorded(lambda: chosen.quantize(x, amax, placement), x)
        scaled = kernels.recorded(lambda: chosen.quantize(x, amax, placement) * 2, x)
        twice = kernels.recorded(
            lambda: chosen.quantize(chosen.quantize(x, amax, placement), amax, placement), x
        )
        copy = x.clone()
        other = kernels.recorded(lambda: chosen.quantize(copy, amax, placement), x)
    assert single[1] is not None
    assert [found[1] for found in (scaled, twice, other)] == [None] * 3


def test_a_call_split_across_threads_is_not_recorded() -> None:
    x = torch.randn(4, 64, 32, 32)  # 262,144 values: split from THREADED_VALUES on
    quantizer = _quantizer("mxfp8")
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            out, replay = kernels.recorded(lambda: _own_call(quantizer, x), x)
    finally:
        torch.set_num_threads(threads)
    assert replay is None
    assert same_bits(out, _own_call(quantizer, x).numpy())


def test_a_replay_keeps_the_numbers_it_points_to(replays) -> None:  # noqa: ANN001
    """The kernels' caches of parameters may be emptied (they are bounded): a replay keeps
    what its arguments point into, whatever takes the freed memory."""
    quantizer = _quantizer("nvfp4", amax=3.0)
    x = _activations(6)
    with torch.inference_mode():
        quantizer(x)
        kernels._parameters.clear()
        gc.collect()
        taken = [(ctypes.c_float * 3)(9.0, 9.0, 9.0) for _ in range(2000)]
        out = quantizer(x)
        assert len(replays) == 1
        assert same_bits(out, _own_call(quantizer, x).numpy())
    assert taken


class HalvedMX(FormatFamily):
    """A family of a user's: MXFP4's kernel, its result then halved in place, which a replay
    of the kernel alone would miss."""

    name = "halved_mxfp4"

    def bits(self, options: object) -> float:
        return 4.25

    def element_bits(self, options: object) -> int:
        return 4

    def quantize(self, x, options, amax, placement):  # noqa: ANN001, ANN201
        return mx_fake_quantize(x, ELEMENTS["e2m1"], 32, placement.block_axis).mul_(0.5)


@pytest.fixture
def halved():  # noqa: ANN201
    REGISTRY.register(HalvedMX.name, options=NoOptions)(HalvedMX())
    try:
        yield
    finally:
        REGISTRY._entries.pop(HalvedMX.name)


def test_a_family_that_does_not_say_it_is_replayable_is_not_replayed(halved, replays) -> None:  # noqa: ANN001
    quantizer = _quantizer("mxfp4")
    quantizer.format = parse_format("halved_mxfp4")
    x = _activations(7)
    with torch.inference_mode():
        expected = mx_fake_quantize(x, ELEMENTS["e2m1"], 32, 1) * 0.5
        for _ in range(3):
            assert same_bits(quantizer(x), expected.numpy())
    assert replays == []
