"""The C kernels of the fake quantization (formats/kernels.py, native/fake_quantize.c), bit for
bit: the integer format against NumPy's float32 arithmetic of its formula; scaled FP8, MX,
NVFP4 and group-wise INT against their eager steps (which tests/formats/test_numerics.py checks
against the peers: modelopt, torchao, Microsoft's MX formulas), on hard values, along every
layout a quantizer hands them, on one thread and on two; and what they leave to the other
paths."""

from __future__ import annotations

import os
import random
import warnings

import pytest
import torch
from format_values import Watching, bits_equal, hard_blocks, hard_values, numpy_formula, same_bits
from torch.utils._python_dispatch import TorchDispatchMode

from model_explorer.formats import kernels
from model_explorer.formats.blocks import (
    fp8_fake_quantize,
    group_int_fake_quantize,
    mx_fake_quantize,
    nvfp4_fake_quantize,
)
from model_explorer.formats.elements import ELEMENTS
from model_explorer.formats.integer import apply_quantization, asymmetric_params, quant_params
from model_explorer.native import ENVIRONMENT_SWITCH


@pytest.fixture(autouse=True)
def integer_kernel_at_every_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The integer kernel takes tensors of every size here (searches leave those below
    kernels.INTEGER_SMALLEST values to the eager steps): these tests are about the kernel."""
    from model_explorer.formats import kernels as _kernels

    monkeypatch.setattr(_kernels, "INTEGER_SMALLEST", 0)


# the kernels' own values and calls: skipped with the kernels off (tests/conftest.py)
pytestmark = pytest.mark.kernels

KERNELS = ("native_integer", "native_scaled", "native_blocks")


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each kernel call, in turn: whether the kernel took the tensor."""
    calls: list[bool] = []
    for name in KERNELS:
        original = getattr(kernels, name)

        def counted(*args: object, _original=original, **kwargs: object) -> torch.Tensor | None:  # noqa: ANN001
            out = _original(*args, **kwargs)
            calls.append(out is not None)
            return out

        monkeypatch.setattr(kernels, name, counted)
    return calls


def kernel_and_eager(run, monkeypatch: pytest.MonkeyPatch, taken: list[bool], threads: int = 1):  # noqa: ANN001, ANN201
    """`run()` through its kernel (which must have taken it) on `threads` threads, and through
    the eager steps (the kernels switched off)."""
    before, count = len(taken), torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            ours = run()
    finally:
        torch.set_num_threads(count)
    assert taken[before:] == [True], "the C kernel did not run on this machine"
    with monkeypatch.context() as patch:
        patch.setenv(ENVIRONMENT_SWITCH, "0")
        with torch.inference_mode():
            eager = run()
    assert True not in taken[before + 1 :]  # declined, or not asked
    return ours, eager


# Blocks along the channels of an NCHW activation (163,840 values: two threads take halves),
# along the rows of a weight, partial blocks (70 and 33 values in blocks of 32 or 16), an axis
# shorter than a block, and blocks along a middle axis with an odd inner length.
LAYOUTS = [((40, 64, 8, 8), 1), ((700, 200), -1), ((3, 70, 5), 1), ((9, 33), -1), ((10, 20), 1)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("element", ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1", "int8"])
@pytest.mark.parametrize("shape, axis", LAYOUTS)
def test_mx_kernel_gives_the_eager_values(
    element: str, shape: tuple[int, ...], axis: int, threads: int, monkeypatch, taken
) -> None:
    x = hard_blocks(shape, axis)
    run = lambda: mx_fake_quantize(x, ELEMENTS[element], 32, axis)  # noqa: E731
    ours, eager = kernel_and_eager(run, monkeypatch, taken, threads)
    assert bits_equal(ours, eager)


@pytest.mark.parametrize("amax", [4.0, 0.0, 1e-3, 3e30, float("nan")])
@pytest.mark.parametrize("shape, axis", LAYOUTS[:4])
def test_nvfp4_kernel_gives_the_eager_values(
    amax: float, shape: tuple[int, ...], axis: int, monkeypatch, taken
) -> None:
    x = hard_blocks(shape, axis)
    run = lambda: nvfp4_fake_quantize(x, torch.tensor(amax), 16, axis)  # noqa: E731
    ours, eager = kernel_and_eager(run, monkeypatch, taken, threads=2)
    assert bits_equal(ours, eager)


def test_nvfp4_block_scales_on_e4m3_midpoints_round_as_the_eager_steps(monkeypatch, taken) -> None:
    """Blocks whose scale (block amax / 6, per-tensor scale exactly 1) lies on each E4M3 value
    and on each midpoint between neighbours: a division by 6 that is not the eager steps'
    (multiplying by 1/6 rounds differently) moves a scale off its tie."""
    e4m3 = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    scales = torch.cat([e4m3, (e4m3[:-1] + e4m3[1:]) / 2])
    x = torch.zeros(scales.numel(), 16)
    x[:, 0] = scales * 6
    x[:, 1] = scales * -2.5
    x[:, 2] = scales
    run = lambda: nvfp4_fake_quantize(x, torch.tensor(2688.0), 16, -1)  # noqa: E731
    ours, eager = kernel_and_eager(run, monkeypatch, taken)
    assert bits_equal(ours, eager)


@pytest.mark.parametrize("element", ["e4m3", "e5m2"])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_fp8_kernel_per_tensor_and_per_channel_gives_the_eager_values(
    element: str, axis: int | None, monkeypatch, taken
) -> None:
    x = hard_blocks((40, 64, 8, 8), 1)
    for amax in (torch.tensor(4.0), torch.tensor(0.0), torch.tensor(3e30)):
        if axis is not None:  # one channel's amax zero, the others spread
            amax = torch.rand(x.shape[axis], generator=torch.Generator().manual_seed(3)) * 5
            amax[1] = 0.0
        run = lambda: fp8_fake_quantize(x, amax, ELEMENTS[element], axis)  # noqa: B023, E731
        ours, eager = kernel_and_eager(run, monkeypatch, taken, threads=2)
        assert bits_equal(ours, eager)


@pytest.mark.parametrize("scale_dtype", [torch.float16, None], ids=["fp16-scales", "float32"])
@pytest.mark.parametrize(
    "bits, group, unsigned, narrow",
    [(4, 128, False, False), (4, 16, False, True), (8, 32, True, False)],
)
@pytest.mark.parametrize("shape, axis", LAYOUTS[:4])
def test_group_int_kernel_gives_the_eager_values(
    bits, group, unsigned, narrow, scale_dtype, shape, axis, monkeypatch, taken
) -> None:  # noqa: ANN001
    x = hard_blocks(shape, axis)
    run = lambda: group_int_fake_quantize(  # noqa: E731
        x, bits, group, axis, unsigned, narrow, scale_dtype
    )
    ours, eager = kernel_and_eager(run, monkeypatch, taken, threads=2)
    assert bits_equal(ours, eager)


def test_fp16_scales_round_as_torch_casts_them(monkeypatch, taken) -> None:
    """Group scales across FP16's range (2-bit groups: the scale is the group's amax): normal,
    subnormal (below 2**-14), the midpoints between neighbours and below its smallest
    subnormal, and beyond 65504 (saturated): the values torch's float16 cast gives (the eager
    steps use it)."""
    halves = torch.arange(0, 31744, dtype=torch.int16).view(torch.float16).float()
    midpoints = (halves[:-1] + halves[1:]) / 2  # exact in float32: ties to even
    scales = torch.cat([halves, midpoints, torch.tensor([2.0**-25, 3 * 2.0**-26, 7e4])])
    x = torch.zeros(scales.numel(), 4)
    x[:, 0] = scales
    x[:, 1] = scales * -0.6
    ours, eager = kernel_and_eager(
        lambda: group_int_fake_quantize(x, 2, 4, -1), monkeypatch, taken, threads=2
    )
    assert bits_equal(ours, eager)


def test_block_kernels_take_any_layout_dtype_and_pass_gradients(monkeypatch, taken) -> None:
    """A transposed input (made contiguous first; the result contiguous, as the eager steps'),
    float16 (quantized as float32, returned in float16), one that needs a gradient (it passes
    straight through)."""
    x = hard_blocks((64, 96), -1)
    for given in (x.t(), x.half()):
        run = lambda: mx_fake_quantize(given, ELEMENTS["e2m1"], 32, 0)  # noqa: B023, E731
        ours, eager = kernel_and_eager(run, monkeypatch, taken)
        assert ours.dtype == given.dtype and ours.is_contiguous()
        assert bits_equal(ours.float(), eager.float())
    weight = torch.randn(64, 96, requires_grad=True)
    out = nvfp4_fake_quantize(weight, torch.tensor(3.0), 16, -1)
    assert taken[-1]
    out.sum().backward()
    assert torch.equal(weight.grad, torch.ones_like(weight))


# -- the integer format ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        quant_params(torch.tensor(2.5), 8),
        quant_params(torch.tensor(2.5), 4, unsigned=True),
        quant_params(torch.tensor(0.37), 2, narrow_range=True),
        quant_params(torch.tensor(0.0), 8),
        asymmetric_params(-0.4, 1.7, 8),
    ],
    ids=["int8", "uint4", "int2 narrow", "amax 0", "asymmetric uint8"],
)
def test_the_integer_kernel_gives_the_formulas_values_bit_for_bit(params, taken) -> None:  # noqa: ANN001
    x = hard_values(float(params.multiplier.reshape(-1)[0].item()) or 1.0)
    with torch.inference_mode():
        out = apply_quantization(x, params)
    assert taken == [True], "the C kernel did not run on this machine"
    assert same_bits(out, numpy_formula(x, params))


def test_the_integer_kernel_per_channel_on_any_threads_gives_the_eager_values(
    taken: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per output channel along axes 0 and 1 (amax 0 in one channel), split across two threads
    (from 2**17 values) and on one: the eager steps' values, bit for bit."""
    x = hard_values(40.0).reshape(-1)[: 12 * 5 * 4399].reshape(12, 5, 4399)
    for axis, count in [(0, 2), (1, 2), (0, 1), (2, 2)]:
        amax = torch.rand(x.shape[axis], generator=torch.Generator().manual_seed(axis)) * 3
        amax[1] = 0.0
        params = quant_params(amax, 5, axis=axis)
        out, eager = kernel_and_eager(
            lambda: apply_quantization(x, params),  # noqa: B023
            monkeypatch,
            taken,
            count,
        )
        assert same_bits(out, eager.numpy())


def attention_operands(packed: torch.Tensor) -> dict[str, torch.Tensor]:
    """The operands an attention hands its products, as nn.MultiheadAttention's unfused path
    makes them from a packed projection (batch, tokens, 3 x 64): 4 heads of 16."""
    batch, tokens = packed.shape[:2]
    q, k, v = (x.reshape(batch, tokens, 4, 16).transpose(1, 2) for x in packed.chunk(3, -1))
    return {
        "query": packed[..., :64],
        "query by head": q,
        "keys transposed": k.transpose(-2, -1),
        "values by head": v,
        "tokens first": packed.transpose(0, 1)[..., 64:128],
        "one sample by head": q[:1],
        "an axis added": q.unsqueeze(2),  # its stride ties with the batch's
    }


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "name", list(attention_operands(torch.zeros(1, 1, 192))), ids=lambda name: name
)
def test_a_slice_of_the_last_axis_in_any_order_is_taken_as_rows_with_gaps(
    name: str, threads: int, monkeypatch, taken
) -> None:
    """The query of a packed projection (the first third of its last axis: rows with gaps) and
    the same slices by head, transposed or permuted as an attention hands them to its
    products, per tensor, integer and FP8: the eager steps' values bit for bit and their
    layout (dense in the order of the slice's memory, as torch lays out an element-wise
    result)."""
    values = hard_values(40.0).reshape(-1)
    packed = torch.cat([values, -values])[: 128 * 17 * 192].reshape(128, 17, 192)
    x = attention_operands(packed)[name]
    if name == "one sample by head":  # 1 x 4 x 17 x 16 values: too few alone
        x = attention_operands(packed.repeat(1, 32, 1))[name]
    params = quant_params(torch.tensor(2.5), 8)
    for run in (
        lambda: apply_quantization(x, params),
        lambda: fp8_fake_quantize(x, torch.tensor(2.5), ELEMENTS["e4m3"]),
        lambda: apply_quantization(x, params, (0.0, 6.0)),
    ):
        ours, eager = kernel_and_eager(run, monkeypatch, taken, threads)
        assert ours.shape == eager.shape == x.shape and ours.stride() == eager.stride()
        assert bits_equal(ours, eager)
    if name == "query":
        assert ours.is_contiguous()


def test_the_memory_order_is_the_one_torch_gives_an_element_wise_result() -> None:
    """`_memory_order` against torch's own: on 2,000 random layouts (slices, permutations,
    axes of one added, ties of strides among them), the result laid out dense in that order
    has the strides of `x * 2`'s."""
    rng = random.Random(0)
    for _ in range(2000):
        shape = [rng.choice([1, 1, 2, 3, 4, 5]) for _ in range(rng.randint(2, 5))]
        base = torch.empty([size * rng.choice([1, 2]) for size in shape])
        x = base[tuple(slice(0, size) for size in shape)].permute(
            rng.sample(range(len(shape)), len(shape))
        )
        if rng.random() < 0.3:
            x = x.unsqueeze(rng.randint(0, x.dim()))
        strides = kernels._dense_strides(x.shape, kernels._memory_order(x))
        assert tuple(strides) == (x * 2).stride(), (x.shape, x.stride())


def test_a_slice_too_small_for_its_checks_or_with_gaps_twice_is_left_to_the_eager_steps(
    taken,
) -> None:
    """Under ROWS_SMALLEST values the checks of a slice's layout cost more than they save; a
    slice of a slice (gaps between a row's parts as well as between rows) is no rows."""
    values = hard_values(40.0).reshape(-1)
    packed = torch.cat([values, -values])[: 128 * 17 * 192].reshape(128, 17, 192)
    small = packed[:28, :, :64]  # 30,464 values
    by_head = packed[..., :64].reshape(128, 17, 4, 16)[..., 1:]  # 15 of each head's 16
    params = quant_params(torch.tensor(2.5), 8)
    with torch.inference_mode():
        for x in (small, by_head, by_head.transpose(1, 2)):
            out = apply_quantization(x, params)
            assert same_bits(out.contiguous(), numpy_formula(x.contiguous(), params))
            assert out.stride() == (x * 1.0).stride()
    assert taken == [False, False, False]


def test_the_integer_kernel_leaves_what_it_does_not_take_to_the_eager_steps(
    taken: list[bool],
) -> None:
    """Per tensor a transposed tensor is taken (its memory has no gaps: the kernel runs over
    it, the result in the same layout); a slice with gaps, a float64 tensor (quantized as
    float32), one a TorchFunctionMode or a TorchScript trace watches are not."""
    params = quant_params(torch.tensor(1.5), 6)
    x = hard_values(float(params.multiplier.item())).reshape(-1)[: 7 * 38000].view(7, 38000)
    with torch.inference_mode():
        transposed = apply_quantization(x.t(), params)
        assert transposed.stride() == x.t().stride()
        assert same_bits(transposed.t().contiguous(), numpy_formula(x, params))
        gaps = apply_quantization(x[:, ::3], params)
        assert same_bits(gaps.contiguous(), numpy_formula(x[:, ::3].contiguous(), params))
        apply_quantization(x.double(), params)
        with Watching():
            apply_quantization(x, params)
    with warnings.catch_warnings():  # a TorchScript trace: the kernel's result a constant there
        warnings.simplefilter("ignore", FutureWarning)
        traced = torch.jit.trace(lambda t: apply_quantization(t, params), x)
    # float64 is float32 again inside; the trace's run, not the kernel (its checking run may)
    assert taken[:5] == [True, False, True, False, False]
    doubled = x * 2
    assert same_bits(traced(doubled), numpy_formula(doubled, params))


class Recording(TorchDispatchMode):
    """A dispatch mode over real tensors (as the operator tracer is): the ATen calls it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_or_an_export_sees_the_eager_steps(taken: list[bool]) -> None:
    """Under a dispatch mode over real tensors the kernel steps aside and the mode sees the
    four steps; torch.export records them too (not the kernel's result as a constant), so the
    exported program quantizes a new input as the formula does."""
    params = quant_params(torch.tensor(1.5), 6)
    x = hard_values(float(params.multiplier.item()))[:4096].reshape(64, 64)
    with torch.inference_mode(), Recording() as recording:
        apply_quantization(x, params)
    assert {"round_.default", "clamp_.default", "div_.Tensor"} <= set(recording.seen)

    class Quantize(torch.nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return apply_quantization(t, params)

    exported = torch.export.export(Quantize(), (x,))
    doubled = x * 2
    assert same_bits(exported.module()(doubled), numpy_formula(doubled, params))
    assert taken == [False, False]


def test_a_torch_func_transform_gets_the_eager_steps(taken: list[bool]) -> None:
    """torch.vmap's and torch.func.grad's tensors hold no memory of their own: the kernels
    step aside (a kernel asked for their address raised before), and the values are the
    untransformed call's, per sample."""
    params = quant_params(torch.tensor(1.5), 6)
    x = hard_values(float(params.multiplier.item()))[: 4 * 9000].reshape(4, 90, 100)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's: no batching rule for clamp_
        mapped = torch.vmap(lambda t: apply_quantization(t, params))(x)
        blocks = torch.vmap(lambda t: mx_fake_quantize(t, ELEMENTS["e4m3"]))(x)
    assert taken == [False, False]
    with torch.inference_mode():
        assert torch.equal(
            mapped.view(torch.int32), apply_quantization(x, params).view(torch.int32)
        )
        direct = mx_fake_quantize(x, ELEMENTS["e4m3"])
        assert torch.equal(blocks.view(torch.int32), direct.view(torch.int32))
    gradient = torch.func.grad(lambda t: apply_quantization(t, params).sum())(x)
    leaf = x.clone().requires_grad_()
    apply_quantization(leaf, params).sum().backward()
    assert torch.equal(gradient, leaf.grad)


# Each format's function with `bounds`, on the layouts its kernels take: per tensor, per
# channel, rows with gaps (a slice of the last axis), blocks along the channels and the rows.
BOUNDED = {
    "int8 per tensor": lambda x, b: apply_quantization(x, quant_params(torch.tensor(2.5), 8), b),
    "uint4 per channel": lambda x, b: apply_quantization(
        x, quant_params(torch.linspace(0.5, 9, x.shape[1]), 4, unsigned=True, axis=1), b
    ),
    "asymmetric uint8": lambda x, b: apply_quantization(x, asymmetric_params(-0.4, 7.0, 8), b),
    "int8 rows with gaps": lambda x, b: apply_quantization(
        x.reshape(40, 64, 64)[..., :40], quant_params(torch.tensor(2.5), 8), b
    ),
    "fp8 per tensor": lambda x, b: fp8_fake_quantize(
        x, torch.tensor(5.0), ELEMENTS["e4m3"], None, b
    ),
    "fp8 per channel": lambda x, b: fp8_fake_quantize(
        x, torch.linspace(0.0, 9, x.shape[1]), ELEMENTS["e5m2"], 1, b
    ),
    "fp8 rows with gaps": lambda x, b: fp8_fake_quantize(
        x.reshape(40, 64, 64)[..., :40], torch.tensor(5.0), ELEMENTS["e4m3"], None, b
    ),
    "mxfp8 channels": lambda x, b: mx_fake_quantize(x, ELEMENTS["e4m3"], 32, 1, b),
    "mxint8 rows": lambda x, b: mx_fake_quantize(x, ELEMENTS["int8"], 32, -1, b),
    "mxfp4 rows": lambda x, b: mx_fake_quantize(x, ELEMENTS["e2m1"], 32, -1, b),
    "nvfp4": lambda x, b: nvfp4_fake_quantize(x, torch.tensor(6.0), 16, 1, b),
    "int4 groups of 16": lambda x, b: group_int_fake_quantize(x, 4, 16, 1, bounds=b),
    "int4 groups float32": lambda x, b: group_int_fake_quantize(
        x, 4, 16, -1, False, False, None, b
    ),
}


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (0.0, float("inf"))], ids=["relu6", "relu"])
@pytest.mark.parametrize("name", list(BOUNDED))
def test_bounds_clamp_in_the_kernel_as_the_activation_before_it(
    name: str, bounds: tuple[float, float], monkeypatch, taken
) -> None:
    """An activation taken over by the quantizer after it (quantization/elision.py): the
    kernel's values with `bounds` are the eager steps' on `torch.clamp`'s output, and the
    kernel's on torch's ReLU6 or ReLU output, bit for bit (NaN, -0, +-Inf, values past 6 and
    negative ones among them), on one thread and on two."""
    x = hard_blocks((40, 64, 8, 8), 1) * 3
    function = BOUNDED[name]
    for threads in (1, 2):
        ours, eager = kernel_and_eager(lambda: function(x, bounds), monkeypatch, taken, threads)  # noqa: B023
        assert bits_equal(ours, eager)
    activation = torch.nn.functional.relu6 if bounds[1] == 6.0 else torch.relu
    with torch.inference_mode():
        after = function(activation(x), None)
    assert taken[-1] is True and bits_equal(ours, after)
    assert bool((x > 6).any()) and bool((x < 0).any()) and bool(x.isnan().any())


def test_the_switch_is_read_from_the_environment_as_it_is_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`MODEL_EXPLORER_COMPILE=0` turns the kernels off from the next call, set or unset at run
    time, through os.environ's own mapping and through any mapping that stands in for it."""
    from model_explorer import native

    monkeypatch.delenv(ENVIRONMENT_SWITCH, raising=False)
    assert native.enabled()
    monkeypatch.setenv(ENVIRONMENT_SWITCH, "0")
    assert not native.enabled()
    monkeypatch.setenv(ENVIRONMENT_SWITCH, "1")
    assert native.enabled()
    monkeypatch.setattr(os, "environ", {ENVIRONMENT_SWITCH: "0"})
    assert not native.enabled()
    monkeypatch.setattr(os, "environ", {})
    assert native.enabled()


def test_a_search_leaves_small_integer_tensors_to_the_eager_steps(
    taken: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below kernels.INTEGER_SMALLEST values the integer format runs its eager steps (ATen's,
    on every core: faster inside a small model's candidates), from it on the kernel; the
    values are the formula's either way."""
    monkeypatch.setattr(kernels, "INTEGER_SMALLEST", 1 << 17)
    params = quant_params(torch.tensor(1.5), 6)
    values = hard_values(float(params.multiplier.item()))
    with torch.inference_mode():
        for x in (values[: (1 << 17) - 1], values[: 1 << 17]):
            assert same_bits(apply_quantization(x, params), numpy_formula(x, params))
    assert taken == [False, True]
