"""Calibrators against the data they saw and against brute-force versions of their rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import entropy as kl_divergence

from model_explorer.quantization import HistogramCalibrator, MaxCalibrator, make_calibrator
from model_explorer.quantization.calibrators import calibrator_from_state


def batches_with_outliers(seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    batches = [torch.randn(20_000, generator=generator) for _ in range(3)]
    batches[1][:5] = torch.tensor([25.0, -30.0, 28.0, 40.0, -22.0])  # rare, far outliers
    return batches


def collected(calibrator, batches):
    for batch in batches:
        calibrator.collect(batch)
    return calibrator


def test_max_is_the_true_max_per_tensor_and_per_channel() -> None:
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randn(4, 3, 5, generator=generator) * (i + 1) for i in range(3)]
    everything = torch.cat(batches)
    assert collected(MaxCalibrator(), batches).compute_amax(8) == everything.abs().max()
    per_channel = collected(MaxCalibrator(axis=1), batches).compute_amax(8)
    assert torch.equal(per_channel, everything.abs().amax(dim=(0, 2)))
    assert collected(MaxCalibrator(), batches).min_value == float(everything.min())


@pytest.mark.parametrize("method", ["percentile", "entropy", "mse"])
def test_histogram_methods_clip_rare_outliers(method: str) -> None:
    batches = batches_with_outliers()
    true_max = max(float(b.abs().max()) for b in batches)
    amax = float(collected(HistogramCalibrator(method), batches).compute_amax(8))
    assert 0 < amax <= true_max
    if method != "mse":  # mse may keep outliers when levels are fine; entropy/percentile clip
        assert amax < 0.5 * true_max


def test_percentile_agrees_with_numpy_within_a_bin() -> None:
    batches = batches_with_outliers()
    calibrator = collected(HistogramCalibrator("percentile", percentile=99.0), batches)
    values = torch.cat(batches).abs().numpy()
    assert (
        abs(float(calibrator.compute_amax(8)) - np.percentile(values, 99.0)) <= calibrator.bin_width
    )


def test_histogram_grows_with_later_batches_and_keeps_every_count() -> None:
    small, large = torch.randn(1000) * 0.1, torch.randn(1000) * 5
    calibrator = collected(HistogramCalibrator("percentile", percentile=100.0), [small, large])
    assert calibrator.histogram.sum() == 2000
    top = float(torch.cat([small, large]).abs().max())
    assert top <= float(calibrator.compute_amax(8)) <= top + calibrator.bin_width
    # A far outlier merges bins instead of growing the histogram without bound.
    calibrator.collect(torch.tensor([1e6]))
    assert len(calibrator.histogram) <= calibrator.max_bins
    assert calibrator.histogram.sum() == 2001


def brute_force_mse(counts: np.ndarray, width: float, bits: int, start_bin: int) -> float:
    """For every candidate edge, quantize each bin centre and weigh its squared error by the
    bin's count; return the edge with the least error."""
    bound = 2 ** (bits - 1) - 1
    best, best_error = None, np.inf
    for stop in range(start_bin, len(counts) + 1):
        amax = stop * width
        error = 0.0
        for index, count in enumerate(counts):
            if count:
                centre = (index + 0.5) * width
                level = min(round(centre * bound / amax), bound)
                error += count * (centre - level * amax / bound) ** 2
        if error < best_error:
            best, best_error = amax, error
    return best


@pytest.mark.parametrize("bits", [3, 5])
def test_mse_minimises_the_quantization_error_among_its_candidates(bits: int) -> None:
    batches = [torch.cat(batches_with_outliers())]  # one batch: exactly 256 bins, all candidates
    calibrator = collected(HistogramCalibrator("mse", num_bins=256, start_bin=16), batches)
    counts = calibrator.histogram.numpy()
    expected = brute_force_mse(counts, calibrator.bin_width, bits, 16)
    assert float(calibrator.compute_amax(bits)) == pytest.approx(expected, rel=1e-6)
    # On the data itself, the chosen amax quantizes better than the plain max.
    data = torch.cat(batches)
    chosen = calibrator.compute_amax(bits)
    maximum = data.abs().max()

    def error(amax):
        from model_explorer.quantization import fake_quantize

        return float(((fake_quantize(data, amax, bits) - data) ** 2).mean())

    assert error(chosen) < error(maximum)


def brute_force_entropy(counts: np.ndarray, width: float, bits: int, start_bin: int) -> float:
    """TensorRT's rule written out plainly: P = bins below the candidate with the rest added
    to the last one; Q = those bins (without the rest) merged into 2**(bits-1) groups and
    spread evenly over the bins where P is non-zero; pick the candidate with the least KL(P||Q)."""
    levels = 2 ** (bits - 1)
    best, best_divergence = None, np.inf
    for stop in range(max(start_bin, levels), len(counts) + 1):
        p = counts[:stop].astype(float).copy()
        p[-1] += counts[stop:].sum()
        q = np.zeros(stop)
        groups = np.array_split(np.arange(stop), levels)
        for group in groups:
            mass = counts[group].sum()
            targets = [i for i in group if p[i] > 0]
            for i in targets:
                q[i] = mass / len(targets)
        if q.sum() == 0 or np.any((p > 0) & (q == 0)):
            continue
        divergence = kl_divergence(p, q)
        if divergence < best_divergence:
            best, best_divergence = stop * width, divergence
    return best


@pytest.mark.parametrize("bits", [4, 6])
def test_entropy_follows_the_kl_rule(bits: int) -> None:
    batches = [torch.cat(batches_with_outliers(seed=3))]
    calibrator = collected(HistogramCalibrator("entropy", num_bins=512, start_bin=32), batches)
    counts = calibrator.histogram.numpy()
    expected = brute_force_entropy(counts, calibrator.bin_width, bits, 32)
    assert float(calibrator.compute_amax(bits)) == pytest.approx(expected, rel=1e-6)


def test_state_round_trip_keeps_the_histogram_not_the_data() -> None:
    batches = batches_with_outliers()
    for method in ("max", "percentile", "mse", "entropy"):
        calibrator = collected(make_calibrator(method), batches)
        state = calibrator.state()
        restored = calibrator_from_state(state)
        for bits in (4, 8):
            assert torch.equal(restored.compute_amax(bits), calibrator.compute_amax(bits))
        # The state is the same size after five times more data: statistics, not samples.
        more = collected(make_calibrator(method), batches * 5).state()

        def size(state):
            return sum(v.numel() for v in state.values() if isinstance(v, torch.Tensor))

        assert size(more) == size(state)


def test_histogram_methods_are_per_tensor_only() -> None:
    with pytest.raises(ValueError, match="per tensor only"):
        make_calibrator("entropy", axis=0)
