"""One environment's run (`measure`: prepared, warmed up, timed over repeats) and the metrics
of a pair of runs (`pair_metrics`, with DeltaNN's: `deltann_metrics`); the metrics are defined
in comparison.py's docstring."""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from model_explorer.analysis.compare.deltann import prediction_metrics, timing_statistics
from model_explorer.analysis.compare.environments import Environment
from model_explorer.analysis.compare.localisation import relative_error

TOP_K = 5


def pair_metrics(a: np.ndarray, b: np.ndarray, k: int = TOP_K) -> dict[str, float]:
    """The metrics of two environments' logits (samples x classes), see the module docstring."""
    if a.shape != b.shape:
        raise ValueError(f"logits of different shapes {a.shape} and {b.shape}")
    k = min(k, a.shape[1])
    top_a = np.sort(np.argsort(-a, axis=1, kind="stable")[:, :k], axis=1)
    top_b = np.sort(np.argsort(-b, axis=1, kind="stable")[:, :k], axis=1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    both_zero = (np.linalg.norm(a, axis=1) == 0) & (np.linalg.norm(b, axis=1) == 0)
    cosine = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), both_zero.astype(float))
    absolute, relative = relative_error(a, b)
    return {
        "top1_agreement": float(np.mean(a.argmax(axis=1) == b.argmax(axis=1))),
        f"top{TOP_K}_agreement": float(np.mean(np.all(top_a == top_b, axis=1))),
        "top_k": k,
        "max_abs_error": absolute,
        "max_rel_error": relative,
        "cosine_similarity_mean": float(cosine.mean()),
        "cosine_similarity_min": float(cosine.min()),
    }


@dataclass
class Run:
    """What one environment produced: logits of the first repeat, seconds per sample of every
    repeat and of every sample, whether every repeat gave bitwise identical logits."""

    name: str
    description: str
    logits: np.ndarray
    seconds_per_sample: list[float]
    bitwise_stable: bool
    prepare_seconds: float
    has_intermediates: bool
    accuracy: float | None = None
    # Seconds per sample, sample by sample: its batch's median time over the repeats divided by
    # the batch's size (with --batch-size 1, each sample's own time, as DeltaNN records it).
    sample_seconds: np.ndarray | None = None
    # The independent measurements behind them: every batch's time per sample in every repeat
    # (what the timing statistics compare: samples of one batch share one measurement).
    timings: np.ndarray | None = None

    @property
    def median_seconds_per_sample(self) -> float:
        return statistics.median(self.seconds_per_sample)


def _batches(inputs: Tensor, batch_size: int) -> list[Tensor]:
    return [inputs[i : i + batch_size] for i in range(0, len(inputs), batch_size)]


def measure(
    env: Environment, model: nn.Module, inputs: Tensor, batch_size: int, repeats: int
) -> Run:
    """Prepare `env` from a copy of `model`, run it once untimed over every batch (warm-up:
    compilation, one-time allocations), then `repeats` timed passes."""
    batches = _batches(inputs, batch_size)
    start = time.perf_counter()
    env.prepare(copy.deepcopy(model), batches[0])
    for batch in batches:  # every batch size once, so that no repeat includes recompilation
        env.run(batch)
    prepared = time.perf_counter() - start
    outputs: list[np.ndarray] = []
    seconds = []
    batch_seconds = np.zeros((repeats, len(batches)))
    for repeat in range(repeats):
        results = []
        for index, batch in enumerate(batches):
            start = time.perf_counter()
            results.append(env.run(batch))
            batch_seconds[repeat, index] = time.perf_counter() - start
        seconds.append(float(batch_seconds[repeat].sum()) / len(inputs))
        outputs.append(torch.cat(results).numpy())
    stable = all(o.tobytes() == outputs[0].tobytes() for o in outputs[1:])
    # Each sample's time: its batch's median over the repeats, shared by the batch's samples.
    sizes = np.array([len(batch) for batch in batches])
    sample_seconds = np.repeat(np.median(batch_seconds, axis=0) / sizes, sizes)
    timings = (batch_seconds / sizes).reshape(-1)
    return Run(
        env.name,
        env.description,
        outputs[0],
        seconds,
        stable,
        prepared,
        env.exposes_intermediates,
        sample_seconds=sample_seconds,
        timings=timings,
    )


def deltann_metrics(a: Run, b: Run) -> dict[str, Any]:
    """DeltaNN's metrics of a pair (analysis/compare/deltann.py): its prediction metrics and the
    statistics of the samples' times."""
    found = prediction_metrics(a.logits, b.logits)
    if a.timings is not None and b.timings is not None:
        found.update(timing_statistics(a.timings, b.timings))
    return found
