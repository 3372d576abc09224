"""Block sparsification against a direct per-block loop over F.unfold's matrix."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from model_explorer.native import ENVIRONMENT_SWITCH
from model_explorer.sparsity import SparseModel, discretize_threshold, kernel, threshold_steps
from model_explorer.sparsity import sparsifier as sparsifier_module


def reference(layer: nn.Module, x: torch.Tensor, block: tuple[int, int], threshold: float):
    """Sparsify the im2col matrix block by block in plain loops; return the layer's output
    from it and the block counts."""
    width, height = block
    if isinstance(layer, nn.Linear):
        cols = x.reshape(x.shape[0], -1, x.shape[-1]).transpose(1, 2).clone()
        spatial = x.shape[1:-1]
        groups = 1
    else:
        x2, padding = x, layer.padding
        if isinstance(padding, str) or layer.padding_mode != "zeros":  # padded by F.pad first
            mode = "constant" if layer.padding_mode == "zeros" else layer.padding_mode
            x2 = F.pad(x, layer._reversed_padding_repeated_twice, mode=mode)
            padding = (0,) * len(layer.kernel_size)
        x2 = x2.unsqueeze(2) if isinstance(layer, nn.Conv1d) else x2
        kernel = (1, *layer.kernel_size) if isinstance(layer, nn.Conv1d) else layer.kernel_size
        stride = (1, *layer.stride) if isinstance(layer, nn.Conv1d) else layer.stride
        padding = (0, *padding) if isinstance(layer, nn.Conv1d) else padding
        dilation = (1, *layer.dilation) if isinstance(layer, nn.Conv1d) else layer.dilation
        cols = F.unfold(x2, kernel, dilation=dilation, padding=padding, stride=stride).clone()
        out_shape = [
            (s + 2 * p - d * (k - 1) - 1) // st + 1
            for s, p, d, k, st in zip(x2.shape[2:], padding, dilation, kernel, stride, strict=True)
        ]
        spatial = out_shape[1:] if isinstance(layer, nn.Conv1d) else out_shape
        groups = layer.groups
    n, k_total, rows = cols.shape
    k = k_total // groups
    total = present = created = 0
    for sample, group in itertools.product(range(n), range(groups)):
        matrix = cols[sample, group * k : (group + 1) * k]
        for bi in range(math.ceil(k / width)):
            for bj in range(math.ceil(rows / height)):
                block = matrix[bi * width : (bi + 1) * width, bj * height : (bj + 1) * height]
                total += 1
                all_zero = bool((block == 0).all())
                present += all_zero
                if block.abs().sum().item() / (width * height) < threshold:
                    created += not all_zero
                    block.zero_()
    weight = layer.weight.reshape(groups, -1, k)
    outputs = [weight[g] @ cols[:, g * k : (g + 1) * k] for g in range(groups)]
    out = torch.cat(outputs, dim=1)
    if layer.bias is not None:
        out = out + layer.bias.view(1, -1, 1)
    if isinstance(layer, nn.Linear):
        out = out.transpose(1, 2).reshape(n, *spatial, -1)
    else:
        out = out.reshape(n, -1, *spatial)
    return out, {
        "total_blocks": total,
        "present_blocks": present,
        "created_blocks": created,
        "samples": n,
    }


def layers():
    torch.manual_seed(0)
    yield nn.Conv2d(4, 6, 3, padding=1), (2, 4, 7, 7)
    yield nn.Conv2d(4, 6, 3, stride=2, padding=0), (2, 4, 9, 8)
    yield nn.Conv2d(6, 6, 5, padding=2, groups=3), (2, 6, 6, 6)
    yield nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False), (2, 6, 5, 7)  # depthwise
    yield nn.Conv2d(4, 5, 1), (2, 4, 6, 6)
    yield nn.Conv2d(3, 4, 3, dilation=2, padding=2), (2, 3, 8, 8)
    yield nn.Conv2d(3, 4, 3, padding="same", padding_mode="reflect"), (2, 3, 7, 6)
    yield nn.Conv2d(130, 5, 3), (2, 130, 4, 5)  # 1,170 columns: more than a panel of weights
    yield nn.Conv1d(3, 4, 3, stride=2, padding=1), (2, 3, 11)
    yield nn.Linear(10, 5), (3, 10)
    yield nn.Linear(10, 5), (2, 7, 10)


BLOCKS = [(8, 8), (4, 2), (3, 5), (1, 1), (64, 64)]


@pytest.fixture(params=["kernel", "convolved", "pieces", "matrix"])
def statistics(request, monkeypatch) -> Iterator[str]:
    """The fused kernel (block_sparse.c), where it takes the layer; or the torch path, with
    block means by one convolution of |x| with a 0/1 weight per block, by depthwise
    convolutions of each channel's parts of the blocks, wherever the sparsifier may take them,
    or from the im2col matrix everywhere: each must count what the reference counts."""
    if request.param == "kernel":
        monkeypatch.setenv(ENVIRONMENT_SWITCH, "1")
        assert kernel.function() is not None, "the block-sparsity kernel was not built here"
        calls: list[int] = []
        real = kernel.run
        monkeypatch.setattr(kernel, "run", lambda *args: calls.append(1) or real(*args))
        yield request.param
        assert calls, "the kernel took no layer"
        return
    monkeypatch.setenv(ENVIRONMENT_SWITCH, "0")
    limit = 0 if request.param == "matrix" else 10**9
    monkeypatch.setattr(sparsifier_module, "CONVOLVED_STATISTICS_BLOCKS", limit)
    pieces = 0 if request.param == "pieces" else 10**9
    monkeypatch.setattr(sparsifier_module, "PIECES_PER_BLOCKS", pieces)
    yield request.param


@pytest.mark.parametrize(
    "layer, shape",
    list(layers()),
    ids=lambda v: str(v) if isinstance(v, tuple) else type(v).__name__,
)
@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_block_statistics_and_output_equal_the_reference(
    layer: nn.Module, shape, block, statistics: str
) -> None:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).relu()  # some zero blocks
    x[0, ..., :2] = 0  # and whole zero regions
    original = x.clone()
    for threshold in (0.0, 0.3, 0.8):
        sparse = SparseModel(nn.Sequential(layer), block_size=block)
        sparse.thresholds = [threshold]
        with torch.no_grad():
            output = sparse(x)
            expected, counts = reference(layer, x, block, threshold)
        assert sparse.stats()["0"] == counts
        torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)
        sparse.restore()
    assert torch.equal(x, original)  # the input is never edited in place


@pytest.mark.parametrize("poison", [math.inf, -math.inf, math.nan])
def test_a_non_finite_input_counts_only_its_own_blocks(poison: float, statistics: str) -> None:
    """An Inf or NaN is in some blocks only: the others keep their means (a convolution with
    0 weights would spread it as NaN to every block at its output positions)."""
    layer = nn.Conv2d(4, 3, 3, padding=1)
    x = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(2))
    x[1, 2, 3, 3] = poison
    for threshold in (0.0, 0.8):
        sparse = SparseModel(nn.Sequential(layer), block_size=(4, 4))
        sparse.thresholds = [threshold]
        with torch.no_grad():
            output = sparse(x)
            expected, counts = reference(layer, x, (4, 4), threshold)
        assert sparse.stats()["0"] == counts
        assert counts["total_blocks"] > counts["created_blocks"] > 0 or threshold == 0
        torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
        sparse.restore()


def test_threshold_zero_changes_nothing_and_above_max_zeroes_everything() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 4, 3),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 5),
    )
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        float_output = model(x)
        sparse = SparseModel(model, block_size=(4, 4))
        assert torch.equal(sparse(x), float_output)
        stats = sparse.stats()
        assert all(s["created_blocks"] == 0 and s["samples"] == 4 for s in stats.values())
        sparse.reset_stats()
        sparse.thresholds = [1e9, 1e9, 1e9]
        zeroed = sparse(x)
    # Every block of every layer's input is zero: each layer outputs its bias.
    assert torch.allclose(zeroed, model[4].bias.expand_as(zeroed))
    stats = sparse.stats()
    assert all(
        s["created_blocks"] + s["present_blocks"] == s["total_blocks"] for s in stats.values()
    )


def test_chunked_equals_unchunked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENVIRONMENT_SWITCH, "0")  # the torch path, which chunks
    torch.manual_seed(0)
    layer = nn.Conv2d(4, 6, 3, padding=1)
    x = torch.randn(9, 4, 10, 10)
    results = []
    for chunk in (1 << 30, 4096):  # one chunk, or one sample at a time
        sparse = SparseModel(nn.Sequential(layer), block_size=(4, 4), chunk_bytes=chunk)
        sparse.thresholds = [0.7]
        with torch.no_grad():
            results.append((sparse(x), sparse.stats()))
        sparse.restore()
    # Chunks may take the dense or the matrix path separately: equal up to float rounding.
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    assert results[0][1] == results[1][1]


@pytest.mark.parametrize("method", ["linear", "log"])
def test_discretization_maps_the_limit_onto_the_last_step(method: str) -> None:
    limit, steps = 2.5, 10
    edges = threshold_steps(limit, steps, method)
    assert edges[0] == 0.0 and edges[-1] == pytest.approx(limit)
    assert discretize_threshold(limit, limit, steps, method) == pytest.approx(limit)
    assert discretize_threshold(limit - 1e-9, limit, steps, method) == pytest.approx(limit)
    assert discretize_threshold(0.0, limit, steps, method) == 0.0
    # Rounded up to the next edge.
    assert discretize_threshold(edges[3] + 1e-6, limit, steps, method) == edges[4]
    assert discretize_threshold(edges[3], limit, steps, method) == edges[3]
    values = [
        discretize_threshold(v, limit, steps, method)
        for v in torch.linspace(0, limit, 101).tolist()
    ]
    assert set(values) <= set(edges.tolist())
    assert discretize_threshold(1.234, limit, steps, "none") == 1.234
