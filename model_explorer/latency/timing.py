"""Timing graphs the way a loaded machine allows: every graph warmed up, then timed in turn
(interleaved rounds, so that a burst of load lands on all of them alike), each sample long
enough for the clock (a fast graph is run several times per sample), the median and the spread
kept, each sample after one untimed call (warm, as a graph served back to back runs); and
what a table was measured on (the machine's identity)."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# A sample lasts at least this long (seconds): one call of a graph of a few microseconds is
# below what the clock and the interpreter around it resolve.
SAMPLE_SECONDS = 0.002


@dataclass(frozen=True)
class Timing:
    """One graph's time per call in milliseconds: the median of its samples and the
    interquartile range, over `samples` samples of `calls` calls each."""

    median: float
    low: float
    high: float
    samples: int
    calls: int

    def to_dict(self) -> dict[str, float]:
        return {
            "median_ms": self.median,
            "q25_ms": self.low,
            "q75_ms": self.high,
            "samples": self.samples,
            "calls": self.calls,
        }

    @classmethod
    def from_dict(cls, data: dict[str, float]) -> Timing:
        return cls(
            data["median_ms"],
            data["q25_ms"],
            data["q75_ms"],
            int(data["samples"]),
            int(data["calls"]),
        )


def interleaved(
    runs: Sequence[Callable[[], object]], repeats: int = 15, warmup: int = 3
) -> list[Timing]:
    """Time each of `runs` (functions running one graph once): `warmup` rounds, then `repeats`
    rounds each timing every run once, in turn."""
    calls = []
    for run in runs:
        started = time.perf_counter()
        for _ in range(warmup):
            run()
        each = (time.perf_counter() - started) / max(warmup, 1)
        calls.append(max(1, min(1000, int(SAMPLE_SECONDS / max(each, 1e-7)))))
    samples: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for index, run in enumerate(runs):
            # one untimed call first: after the other graphs of the round, this one's weights
            # and buffers have left the caches, which a graph run back to back keeps warm
            run()
            started = time.perf_counter()
            for _ in range(calls[index]):
                run()
            samples[index].append((time.perf_counter() - started) / calls[index] * 1000)
    return [_summary(values, count) for values, count in zip(samples, calls, strict=True)]


def _summary(values: list[float], calls: int) -> Timing:
    if len(values) < 2:
        return Timing(values[0], values[0], values[0], len(values), calls)
    quartiles = statistics.quantiles(values, n=4)
    return Timing(statistics.median(values), quartiles[0], quartiles[2], len(values), calls)


def cpu_model() -> str:
    """The processor's model name (Linux's /proc/cpuinfo, else what platform says)."""
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()
