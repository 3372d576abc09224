"""The rules that choose amax from a histogram of |x| (bins of one width from 0): by percentile,
by least squared quantization error (mse) and by least Kullback-Leibler divergence (entropy,
TensorRT's rule). The histogram calibrators (calibrators.py) apply them to what they collected.
"""

from __future__ import annotations

import math

import numpy as np


def percentile_amax(counts: np.ndarray, width: float, percentile: float) -> float:
    """The upper edge of the first bin at which the cumulative share reaches `percentile`."""
    cumulative = np.cumsum(counts) / counts.sum()
    index = int(np.searchsorted(cumulative, percentile / 100.0 - 1e-12))
    return float(min(index + 1, len(counts)) * width)


def candidate_stops(bins: int, start_bin: int, limit: int = 2048) -> np.ndarray:
    """Candidate amax positions as a number of bins from 0 (amax = the upper edge of bin
    stop - 1): every bin from `start_bin` on, thinned to at most about `limit` candidates."""
    start = min(start_bin, bins)
    stride = max(1, math.ceil((bins - start) / limit))
    stops = np.arange(start, bins + 1, stride)
    return stops if stops[-1] == bins else np.append(stops, bins)


def quantization_mse(
    counts: np.ndarray, width: float, amax: np.ndarray, num_bits: int, unsigned: bool
) -> np.ndarray:
    """Mean squared error of fake-quantizing every bin centre, weighted by its count, for each
    candidate amax (vectorised over candidates)."""
    bound = 2 ** (num_bits - 1 + int(unsigned)) - 1
    centres = (np.arange(len(counts)) + 0.5) * width
    scale = bound / amax[:, None]
    quantized = np.clip(np.round(centres[None, :] * scale), 0, bound) / scale
    return ((quantized - centres[None, :]) ** 2 * counts[None, :]).sum(axis=1) / counts.sum()


def mse_amax(
    counts: np.ndarray, width: float, num_bits: int, unsigned: bool, start_bin: int
) -> float:
    stops = candidate_stops(len(counts), start_bin)
    stops = stops[stops > 0]
    errors = np.concatenate(
        [
            quantization_mse(counts, width, chunk * width, num_bits, unsigned)
            for chunk in np.array_split(stops, max(1, len(stops) // 256))
        ]
    )
    return float(stops[int(np.argmin(errors))] * width)


def asymmetric_mse_range(
    positive: np.ndarray,
    negative: np.ndarray,
    width: float,
    num_bits: int,
    extent: tuple[float, float],
    start_bin: int,
) -> tuple[float, float]:
    """(|low|, high) of an asymmetric range with the least squared quantization error over both
    sides' histograms (`positive`: counts of values >= 0, `negative`: of the negatives'
    magnitudes, bins of `width` from 0): the observed range (`extent`, its two magnitudes)
    scaled down by one factor, the larger side ending on mse_amax's candidates. The
    grid has 2**num_bits levels with step (high + |low|) / (2**num_bits - 1) and the zero point
    round(|low| / step), which does not depend on the factor."""
    levels = 2**num_bits - 1
    span = extent[0] + extent[1]
    zero = round(extent[0] / span * levels)
    total = positive.sum() + negative.sum()
    centres = (np.arange(len(positive)) + 0.5) * width
    values = np.concatenate([centres, -centres])
    counts = np.concatenate([positive, negative])
    bins = max(1, math.ceil(max(extent) / width))
    stops = candidate_stops(bins, start_bin)
    # The larger side ends on mse_amax's candidates (bin edges), the other side in proportion.
    factors = np.minimum(stops[stops > 0] * width / max(extent), 1.0)
    errors = []
    for chunk in np.array_split(factors, max(1, len(factors) // 256)):
        step = (chunk * span / levels)[:, None]
        levels_of = np.clip(np.round(values[None, :] / step) + zero, 0, levels)
        quantized = (levels_of - zero) * step
        errors.append(((quantized - values[None, :]) ** 2 * counts[None, :]).sum(axis=1))
    best = float(factors[int(np.argmin(np.concatenate(errors) / total))])
    return best * extent[0], best * extent[1]


def _kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) of two histograms (normalised here); inf where q misses mass that p has."""
    p = p / p.sum()
    q = q / q.sum()
    mask = p > 0
    if np.any(q[mask] == 0):
        return math.inf
    return float(np.sum(p[mask] * (np.log(p[mask]) - np.log(q[mask]))))


def merged_distribution(source: np.ndarray, occupied: np.ndarray, levels: int) -> np.ndarray:
    """`source` merged into `levels` groups of adjacent bins, each group's mass spread evenly
    over the group's bins marked `occupied`."""
    sizes = np.full(levels, len(source) // levels)
    sizes[: len(source) % levels] += 1
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    occupied = occupied.astype(np.float64)
    mass = np.add.reduceat(source, starts)
    filled = np.add.reduceat(occupied, starts)
    per_bin = np.divide(mass, filled, out=np.zeros_like(mass), where=filled > 0)
    return np.repeat(per_bin, sizes) * occupied


def entropy_amax(
    counts: np.ndarray, width: float, num_bits: int, unsigned: bool, start_bin: int
) -> float:
    """The threshold minimising KL(P || Q) (TensorRT's entropy calibration): P is the histogram
    cut at the candidate with the clipped tail added to its last bin; Q is the cut histogram
    without the tail, merged into as many groups as there are positive quantization levels and
    spread back evenly over the bins where P is non-zero. Clipping shows as P's heavy last bin
    that Q cannot match; coarse levels show as Q's flattened groups."""
    levels = 2 ** (num_bits - 1 + int(unsigned))
    bins = len(counts)
    if levels >= bins:
        # Levels finer than the bins: the histogram cannot tell thresholds apart; keep all.
        return float(bins * width)
    counts = counts.astype(np.float64)
    if bins > 1:
        # The first bin holds the exact zeros (half of a ReLU's output): a spike that no
        # quantized distribution matches and that would drive the threshold down to where Q
        # resolves it. TensorRT's rule, as NVIDIA's calibrators implement it, gives that bin
        # its neighbour's count.
        counts[0] = counts[1]
    tail = np.cumsum(counts[::-1])[::-1]  # tail[i] = counts[i:].sum()
    best_stop, best_divergence = bins, math.inf
    for stop in candidate_stops(bins, max(start_bin, levels)):
        reference = counts[:stop].copy()
        if stop < bins:
            reference[-1] += tail[stop]
        if reference.sum() == 0:
            continue
        candidate = merged_distribution(counts[:stop], reference > 0, levels)
        if candidate.sum() == 0:
            continue
        divergence = _kl_divergence(reference, candidate)
        if divergence < best_divergence:
            best_stop, best_divergence = stop, divergence
    return float(best_stop * width)
