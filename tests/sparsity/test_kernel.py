"""The fused block-sparsity kernel (sparsity/kernel.py, block_sparse.c) where the layer-by-layer
reference of test_sparsifier.py does not reach: the input's layout, many samples in several
batches and threads, a whole torchvision network against the torch path (which that reference
checks), the ways back to the torch path, and a compiler that is missing."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model_explorer import native
from model_explorer.native import ENVIRONMENT_SWITCH
from model_explorer.sparsity import SparseModel, kernel


def sparse_run(model: nn.Module, x: torch.Tensor, thresholds: list[float], fused: bool):
    """The sparse model's output and block counts, by the kernel or by the torch path."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENVIRONMENT_SWITCH, "1" if fused else "0")
        calls: list[int] = []
        real = kernel.run
        patch.setattr(kernel, "run", lambda *args: calls.append(1) or real(*args))
        sparse = SparseModel(model, block_size=(4, 4))
        sparse.thresholds = thresholds
        with torch.inference_mode():
            out = sparse(x)
        stats = sparse.stats()
        sparse.restore()
    assert bool(calls) == fused, "the kernel ran where it should not, or not where it should"
    return out, stats


@pytest.fixture(autouse=True)
def built() -> None:
    assert kernel.function() is not None, "the block-sparsity kernel was not built here"


def test_any_layout_and_many_samples_in_batches_and_threads_give_the_torch_paths_blocks() -> None:
    """300 samples of 4x12x12 (several of the kernel's batches), channels-last or as a strided
    view, on one and on two threads: the torch path's counts, its outputs up to rounding, and
    the same outputs bit for bit whatever the threads."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 5, 3, stride=2))
    base = torch.randn(300, 4, 12, 14).relu()
    expected, counts = sparse_run(model, base[..., :12].contiguous(), [0.4, 0.6], fused=False)
    assert counts["0"]["created_blocks"] > 0 and counts["2"]["created_blocks"] > 0
    threads = torch.get_num_threads()
    outputs = []
    try:
        for count, x in [
            (1, base[..., :12]),  # a view whose rows are not contiguous
            (2, base[..., :12].contiguous(memory_format=torch.channels_last)),
            (2, base[..., :12].contiguous()),
        ]:
            torch.set_num_threads(count)
            out, stats = sparse_run(model, x, [0.4, 0.6], fused=True)
            assert stats == counts
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
            outputs.append(out)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[1], outputs[2])


def test_resnet18_gives_the_torch_paths_blocks_and_outputs() -> None:
    """torchvision's resnet18 (random weights) on 32x32 inputs: strided, 1x1 and 7x7
    convolutions, block rows across rows of outputs and panels of weights (4,608 columns);
    every threshold 0.3, every threshold 0 (only the blocks of zeros counted), and 0 and 0.3
    layer by layer (its Linear layer among those that drop blocks)."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    x = torch.randn(6, 3, 32, 32)
    count = sum(isinstance(module, (nn.Conv2d, nn.Linear)) for module in model.modules())
    for thresholds in ([0.3] * count, [0.0] * count, [0.0, 0.3] * (count // 2) + [0.3]):
        expected, counts = sparse_run(model, x, thresholds, fused=False)
        out, stats = sparse_run(model, x, thresholds, fused=True)
        assert stats == counts
        created = sum(s["created_blocks"] for s in stats.values())
        present = sum(s["present_blocks"] for s in stats.values())
        assert created == 0 if max(thresholds) == 0 else 0 < created
        assert 0 < present and created < sum(s["total_blocks"] for s in stats.values())
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.kernels
def test_a_gradient_the_kernel_cannot_give_takes_the_torch_path() -> None:
    torch.manual_seed(0)
    layer = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    sparse = SparseModel(nn.Sequential(layer), block_size=(4, 4))
    sparse.thresholds = [0.5]
    assert not kernel.applies(layer, x, layer.weight)
    sparse(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    with torch.no_grad():
        assert kernel.applies(layer, x, layer.weight)
    assert not kernel.applies(layer, x.double(), layer.weight.double())


def test_without_a_compiler_one_warning_and_the_torch_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 3))
    x = torch.randn(5, 3, 8, 8)
    expected, counts = sparse_run(model, x, [0.5, 0.5], fused=False)
    monkeypatch.setattr(native, "_libraries", {})
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("MODEL_EXPLORER_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv(ENVIRONMENT_SWITCH, "1")
    sparse = SparseModel(model, block_size=(4, 4))
    sparse.thresholds = [0.5, 0.5]
    with pytest.warns(RuntimeWarning, match="could not be built.*torch path"):
        with torch.inference_mode():
            first = sparse(x)
    assert kernel.function() is None
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        sparse(x)
    torch.testing.assert_close(first, expected, rtol=0, atol=0)
    assert {name: s["created_blocks"] * 2 for name, s in counts.items()} == {
        name: s["created_blocks"] for name, s in sparse.stats().items()
    }


def test_a_compiler_that_fails_is_named_with_its_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """A compiler that runs and fails (here a script standing in for one): its error line."""
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'block_sparse.c:1:1: error: planted failure' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(native, "_libraries", {})
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("MODEL_EXPLORER_KERNEL_DIR", str(tmp_path / "kernels"))
    with pytest.warns(RuntimeWarning, match="error: planted failure"):
        assert kernel.function() is None
    assert not list((tmp_path / "kernels").glob("*.tmp"))  # nothing half-written is left


def test_the_compilers_arguments_name_their_own_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """CC with other arguments (another instruction level, a sanitizer) builds a library of its
    own, not the one built before in the same directory: a script standing in for the
    compiler records what it was asked and writes an empty file."""
    fake = tmp_path / "cc"
    fake.write_text(
        '#!/bin/sh\necho "$@" >> "$(dirname "$0")/calls"\n'
        'for a; do [ "$prev" = "-o" ] && : > "$a"; prev="$a"; done\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("MODEL_EXPLORER_KERNEL_DIR", str(tmp_path / "kernels"))
    source = Path(native.__file__).with_name("block_sparse.c")
    names = set()
    for arguments in ("", " -march=x86-64", " -march=x86-64", " -fsanitize=address"):
        monkeypatch.setenv("CC", f"{fake}{arguments}")
        names.add(native._build(native._compiler(), source).name)
    assert len(names) == 3
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len([call for call in calls if " -o " in call]) == 3  # the repeat's was kept


def test_weights_changed_in_place_are_read_again() -> None:
    """The kernel keeps its copy of a layer's weights between passes: an in-place change (an
    optimiser's step, a state dict loaded) must reach the next pass."""
    torch.manual_seed(0)
    layer = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(3, 3, 8, 8).relu()
    sparse = SparseModel(nn.Sequential(layer), block_size=(4, 4))
    sparse.thresholds = [0.5]
    with torch.inference_mode():
        before = sparse(x)
    with torch.no_grad():
        for parameter in sparse.model.parameters():
            if parameter.dim() > 1:
                parameter.mul_(2)
    with torch.inference_mode():
        after = sparse(x)
    bias = layer.bias.view(1, -1, 1, 1)
    torch.testing.assert_close(after - bias, 2 * (before - bias), rtol=1e-5, atol=1e-6)


def test_a_kernel_directory_another_user_owns_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """A library planted in a shared temporary directory would be loaded: the directory must
    be the user's own."""
    monkeypatch.setattr(native, "_libraries", {})
    monkeypatch.setenv("MODEL_EXPLORER_KERNEL_DIR", str(tmp_path))
    monkeypatch.setattr(os, "getuid", lambda: tmp_path.stat().st_uid + 1)
    with pytest.warns(RuntimeWarning, match="belongs to another user"):
        assert kernel.function() is None
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "layer, shape",
    [
        (nn.Conv2d(1, 4, 3, padding=1), (2, 3, 8, 8)),  # three channels where one is expected
        (nn.Conv2d(2, 4, 5), (2, 2, 3, 3)),  # smaller than the kernel
        (nn.Conv2d(2, 4, 5, padding="valid"), (2, 2, 4, 9)),
        (nn.Linear(6, 3), (2, 5)),
    ],
    ids=["channels", "smaller than the kernel", "valid", "features"],
)
def test_an_input_of_the_wrong_shape_gets_the_runtimes_error(layer: nn.Module, shape) -> None:
    """The kernel would read past its buffers (a heap corrupted, a process aborted), and the
    torch path's statistics would name their own weights: the runtime's layer says what is
    wrong, as it does without sparsity."""
    x = torch.randn(*shape)
    assert not kernel.applies(layer, x, layer.weight.detach())
    with torch.inference_mode():
        with pytest.raises(RuntimeError) as plain:
            layer(x)
        sparse = SparseModel(nn.Sequential(layer), block_size=(4, 4))
        sparse.thresholds = [0.3]
        with pytest.raises(RuntimeError) as sparsified:
            sparse(x)
    assert str(sparsified.value) == str(plain.value)


@pytest.mark.parametrize("threshold", [0.0, 0.5])
@pytest.mark.parametrize("linear", [False, True])
def test_a_block_is_counted_as_zeros_only_where_every_value_is_zero(
    threshold: float, linear: bool
) -> None:
    """A 1x1 convolution of one 4x4 channel: with blocks of 4 x 4 its matrix is one column
    (padded to four) by 16 rows, four blocks, one per row of the input; a Linear layer of 16
    features on one row (block_sparse.c's one_position): four blocks of four features. A block
    of zeros and -0.0 holds only zeros; one of zeros and one subnormal does not (its mean,
    1e-45 / 16, is 0 in float32, its sum is not), and below a threshold it is dropped; one with
    NaN is kept. By hand: 4 blocks, 1 holding only zeros, 1 dropped besides at 0.5."""
    model = nn.Sequential(nn.Linear(16, 1) if linear else nn.Conv2d(1, 1, 1))
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 0, 1] = -0.0
    x[0, 0, 1, 0] = 1e-45
    x[0, 0, 2] = torch.tensor([3.0, -2.0, 5.0, 1.0])
    x[0, 0, 3, 0] = float("nan")
    _, stats = sparse_run(model, x.view(1, 16) if linear else x, [threshold], fused=True)
    assert stats["0"] == {
        "total_blocks": 4,
        "present_blocks": 1,
        "created_blocks": 1 if threshold else 0,
        "samples": 1,
    }


def zero_blocks_of_the_matrix(layer: nn.Module, x: torch.Tensor, block: tuple[int, int]) -> int:
    """The blocks of the im2col matrix (F.unfold's, padded with zeros to whole blocks) that
    hold only zeros: an independent count in a few vectorised torch steps."""
    width, height = block
    if isinstance(layer, nn.Linear):
        matrix = x.reshape(x.shape[0], -1, x.shape[-1]).transpose(1, 2).unsqueeze(1)
    else:
        two_d = isinstance(layer, nn.Conv2d)
        planar = x if two_d else x.unsqueeze(2)
        lift = (lambda v: tuple(v)) if two_d else (lambda v: (1, *v))
        padding = lift(layer.padding) if two_d else (0, *layer.padding)
        columns = F.unfold(
            planar, lift(layer.kernel_size), lift(layer.dilation), padding, lift(layer.stride)
        )
        matrix = columns.unflatten(1, (layer.groups, -1))
    n, groups, k, rows = matrix.shape
    nonzero = F.pad(matrix != 0, (0, -rows % height, 0, -k % width))
    blocks = nonzero.unflatten(3, (-1, height)).unflatten(2, (-1, width))
    return int((~blocks.any(dim=(3, 5))).sum())


def test_a_linear_layers_rows_in_any_layout_drop_the_torch_paths_blocks() -> None:
    """A Linear layer of one row a sample (block_sparse.c's one_position) on 42 features
    (ten blocks of 4 and a partial one), in multiples of 1/4 so that block means are exact and
    some equal the threshold (kept: only a mean below it drops the block), the partial block's
    in the first sample (the second's just below): contiguous, a
    transposed view (its features not adjacent) and rows with gaps give the torch path's
    counts and outputs."""
    generator = torch.Generator().manual_seed(3)
    values = torch.randint(-8, 9, (9, 42), generator=generator) / 4
    values[torch.rand(9, 42, generator=generator) < 0.4] = 0
    values[:2, 40:] = torch.tensor([[2.0, -2.0], [2.0, 1.75]])  # the partial block's mean at it
    layer = nn.Sequential(nn.Linear(42, 5))
    threshold = 0.25
    sums = F.pad(values.abs(), (0, 2)).view(9, 11, 4).sum(-1)
    assert (sums / 16 == threshold).any() and (sums / 16 < threshold).any()
    assert sums[0, -1] / 16 == threshold and sums[1, -1] / 16 < threshold
    expected, counts = sparse_run(layer, values, [threshold], fused=False)
    assert counts["0"]["created_blocks"] > 0
    for x in (values, values.t().contiguous().t(), torch.cat([values, values], 1)[:, :42]):
        out, stats = sparse_run(layer, x, [threshold], fused=True)
        assert stats == counts, x.stride()
        torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_a_convolutions_block_whose_mean_is_the_threshold_is_kept() -> None:
    """A 3x3 convolution of 2 channels (an im2col matrix of 18 columns by 64 rows, blocks of
    4 x 4) on values in multiples of 1/4, so that every block's mean is exact: at a threshold
    equal to the means of many blocks, those are kept and the rest below it dropped, as the
    torch path keeps and drops them (counts and outputs)."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randint(-6, 7, (6, 2, 8, 8), generator=generator) / 4
    x[torch.rand(x.shape, generator=generator) < 0.5] = 0
    matrix = F.pad(F.unfold(x, 3, padding=1).abs(), (0, 0, 0, 2))  # (N, 20, 64)
    means = matrix.unflatten(1, (5, 4)).unflatten(3, (16, 4)).mean((2, 4))
    values, counts = means[means > 0].unique(return_counts=True)
    threshold = float(values[counts.argmax()])
    assert counts.max() > 10 and (means[means > 0] < threshold).any()
    model = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1))
    expected, stats = sparse_run(model, x, [threshold], fused=False)
    out, fused = sparse_run(model, x, [threshold], fused=True)
    assert fused == stats and stats["0"]["created_blocks"] > 0
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def random_layers(cases: int) -> Iterator[tuple[nn.Module, torch.Tensor, tuple[int, int]]]:
    """Convolutions of random geometry (kernels up to 9 x 9, strides up to 3, dilations,
    padding, groups, 1 to 13 values a side), Conv1d and Linear layers of one and of many rows,
    on inputs mostly of zeros, contiguous, channels-last or a strided view, with block sizes
    narrower, wider and taller than 8."""
    generator = torch.Generator().manual_seed(7)

    def pick(*options):
        return options[int(torch.randint(len(options), (1,), generator=generator))]

    for case in range(cases):
        groups, kind = pick(1, 1, 2), case % 5
        channels = groups * pick(1, 2, 3, 5)
        if kind == 3:
            layer = nn.Conv1d(channels, 2, pick(1, 3, 5), pick(1, 2, 3), pick(0, 1, 2))
            reach = layer.kernel_size[0] - 2 * layer.padding[0]
            shape = (3, channels, max(pick(1, 4, 9, 17), reach))
        elif kind == 4:
            layer = nn.Linear(pick(1, 7, 16, 40), 3)
            shape = (pick(3, 5), *pick((), (6,), (2, 3)), layer.in_features)
        else:
            kernel = (pick(1, 2, 3, 5, 9), pick(1, 3, 5, 7))
            layer = nn.Conv2d(
                channels,
                2 * groups,
                kernel,
                (pick(1, 2, 3), pick(1, 1, 2, 3)),
                (pick(0, 1, 3), pick(0, 1, 2)),
                (pick(1, 1, 2), pick(1, 2)),
                groups,
            )
            size = [pick(1, 4, 8, 13) for _ in range(2)]
            reach = [
                d * (k - 1) + 1 - 2 * p
                for d, k, p in zip(layer.dilation, layer.kernel_size, layer.padding, strict=True)
            ]
            shape = (3, channels, *(max(s, r) for s, r in zip(size, reach, strict=True)))
        x = torch.randn(*shape, generator=generator)
        x[torch.rand(*shape, generator=generator) < pick(0.5, 0.9, 0.99)] = 0
        if kind < 3 and case % 3 == 1:
            x = x.contiguous(memory_format=torch.channels_last)
        elif case % 3 == 2:
            x = torch.cat([x, x], dim=-1)[..., : shape[-1]]  # rows with gaps
        yield layer, x, pick((8, 8), (4, 4), (3, 5), (1, 1), (5, 12), (16, 16), (2, 9))


def test_with_threshold_zero_the_kernel_counts_the_matrixs_zero_blocks() -> None:
    """Threshold 0 drops nothing and only counts the blocks holding nothing but zeros, from a
    map of which values are not zero (block_sparse.c's zero_counts): on 60 random layers,
    inputs and block sizes, its counts are those of F.unfold's matrix."""
    for layer, x, block in random_layers(60):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(ENVIRONMENT_SWITCH, "1")
            sparse = SparseModel(nn.Sequential(layer), block_size=block)
            sparse.thresholds = [0.0]
            with torch.inference_mode():
                out = sparse(x)
                expected = layer(x)
        where = f"{layer} on {tuple(x.shape)} (strides {x.stride()}), blocks {block}"
        stats = sparse.stats()["0"]
        assert stats["present_blocks"] == zero_blocks_of_the_matrix(layer, x, block), where
        assert stats["created_blocks"] == 0 and torch.equal(out, expected), where
