"""How sure a measured accuracy is, from the per-sample outcomes it was counted from.

A search scores every candidate on the same samples, so two candidates (or a candidate and the
float model) are compared sample by sample: a paired comparison, which needs far fewer samples
than two independent accuracies would (Dietterich 1998). Two kinds of per-sample outcome:

- **hits**, one bit per sample (top-1 right or wrong): one accuracy gets a Wilson score
  interval; two are compared by McNemar's exact test on the samples where exactly one of them
  is right (the discordant pairs), and their difference gets the asymptotic interval of a
  paired proportion;
- **values**, one number per sample (the KL divergence from the float model, a cosine): a mean
  gets Student's t interval; two are compared by the paired t-test on their differences.

Each comparison also says how many samples would separate what it could not: the sample count
at which a difference of the size seen would be significant at `ALPHA` with `POWER`, the
discordant share and the spread of the differences taken as measured.

Per-sample outcomes travel in result files as plain strings (`pack_hits`, `pack_values`), so a
result stays plain data. scipy gives the distributions; nothing here imports torch.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# Two-sided level of every interval and test, and the power a separating sample count aims at.
ALPHA = 0.05
POWER = 0.8


def pack_hits(hits: Any) -> str:
    """Per-sample bits (right or wrong) as a hex string, 8 samples per byte."""
    bits = np.asarray(hits, dtype=bool).ravel()
    return f"{len(bits)}:" + np.packbits(bits).tobytes().hex()


def unpack_hits(text: str) -> np.ndarray:
    count, _, data = text.partition(":")
    return np.unpackbits(np.frombuffer(bytes.fromhex(data), dtype=np.uint8))[: int(count)].astype(
        bool
    )


def pack_values(values: Any) -> str:
    """Per-sample numbers as base64 of little-endian float32."""
    array = np.asarray(values, dtype="<f4").ravel()
    return base64.b64encode(array.tobytes()).decode("ascii")


def unpack_values(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(float)


def _z(probability: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(probability))


@dataclass(frozen=True)
class Estimate:
    """A mean over samples with its interval (`low`, `high`) at level 1 - ALPHA."""

    value: float
    low: float
    high: float
    samples: int

    def __str__(self) -> str:
        return f"{self.value:.4f} [{self.low:.4f}, {self.high:.4f}]"


def wilson(hits: Any) -> Estimate:
    """An accuracy (share of hits) with its Wilson score interval."""
    bits = np.asarray(hits, dtype=bool).ravel()
    n = len(bits)
    if n == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    share = float(bits.mean())
    z = _z(1 - ALPHA / 2)
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n))
    return Estimate(share, max(0.0, centre - half), min(1.0, centre + half), n)


def mean_interval(values: Any) -> Estimate:
    """A mean of per-sample values with Student's t interval."""
    from scipy.stats import t

    array = np.asarray(values, dtype=float).ravel()
    n = len(array)
    mean = float(array.mean()) if n else float("nan")
    if n < 2:
        return Estimate(mean, mean, mean, n)
    half = float(t.ppf(1 - ALPHA / 2, n - 1)) * float(array.std(ddof=1)) / math.sqrt(n)
    return Estimate(mean, mean - half, mean + half, n)


@dataclass(frozen=True)
class Paired:
    """Two candidates compared on the same samples: `difference` is first minus second (in the
    outcome's units: a share of samples for hits), with its interval; `p_value` the two-sided
    test's; `needed` the samples at which a difference of this size would be significant
    (None where none was seen, so no count separates them)."""

    difference: float
    low: float
    high: float
    p_value: float
    samples: int
    needed: int | None
    # hits only: samples only the first got right, and only the second
    only_first: int = 0
    only_second: int = 0

    @property
    def distinct(self) -> bool:
        """Whether the difference is significant at ALPHA."""
        return self.p_value < ALPHA

    def as_dict(self) -> dict[str, Any]:
        return {
            "difference": self.difference,
            "low": self.low,
            "high": self.high,
            "p_value": self.p_value,
            "samples": self.samples,
            "needed": self.needed,
            "only_first": self.only_first,
            "only_second": self.only_second,
        }


def mcnemar(first: Any, second: Any) -> Paired:
    """Two accuracies on the same samples: McNemar's exact test (a binomial test of the
    discordant pairs at one half) and the asymptotic interval of the paired difference."""
    from scipy.stats import binomtest

    a = np.asarray(first, dtype=bool).ravel()
    b = np.asarray(second, dtype=bool).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes of {len(a)} and {len(b)} samples")
    n = len(a)
    only_first, only_second = int(np.sum(a & ~b)), int(np.sum(~a & b))
    discordant = only_first + only_second
    difference = (only_first - only_second) / n if n else 0.0
    p_value = binomtest(only_first, discordant, 0.5).pvalue if discordant else 1.0
    spread = math.sqrt(max(discordant - (only_first - only_second) ** 2 / n, 0.0)) / n if n else 0
    z = _z(1 - ALPHA / 2)
    needed = _mcnemar_needed(discordant / n, abs(difference)) if n else None
    return Paired(
        difference,
        difference - z * spread,
        difference + z * spread,
        float(p_value),
        n,
        needed,
        only_first,
        only_second,
    )


def _mcnemar_needed(discordant: float, difference: float) -> int | None:
    """Samples at which McNemar's test finds a paired difference of `difference` with the
    discordant share `discordant` significant at ALPHA with POWER (Connor 1987)."""
    if difference <= 0:
        return None
    za, zb = _z(1 - ALPHA / 2), _z(POWER)
    root = za * math.sqrt(discordant) + zb * math.sqrt(max(discordant - difference**2, 0.0))
    return math.ceil((root / difference) ** 2)


def paired_means(first: Any, second: Any) -> Paired:
    """Two means of per-sample values on the same samples: the paired t-test on the
    differences, with Student's t interval of their mean."""
    from scipy.stats import t

    a = np.asarray(first, dtype=float).ravel()
    b = np.asarray(second, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired outcomes of {len(a)} and {len(b)} samples")
    differences = a - b
    n = len(differences)
    mean = float(differences.mean()) if n else 0.0
    spread = float(differences.std(ddof=1)) if n > 1 else 0.0
    if spread == 0.0:
        same = mean == 0.0
        return Paired(mean, mean, mean, 1.0 if same else 0.0, n, None if same else n)
    error = spread / math.sqrt(n)
    statistic = mean / error
    p_value = float(2 * t.sf(abs(statistic), n - 1))
    half = float(t.ppf(1 - ALPHA / 2, n - 1)) * error
    needed = None
    if mean != 0.0:
        needed = math.ceil(((_z(1 - ALPHA / 2) + _z(POWER)) * spread / abs(mean)) ** 2)
    return Paired(mean, mean - half, mean + half, p_value, n, needed)


def pack_outcome(outcome: Any) -> dict[str, str]:
    """A fully scored Outcome's per-sample outcomes (metrics.score with `keep_outcomes`) as
    plain strings: `hits` (a metric counting hits, one output), `values` (a metric averaging
    per-sample values, one output) and `kl` (the divergence from the float model); none for an
    outcome scored in part or by a metric that is no mean over samples."""
    if not getattr(outcome, "complete", False):
        return {}
    kept: dict[str, str] = {}
    outcomes = getattr(outcome, "outcomes", None)
    if outcomes and len(outcomes) == 1 and outcomes[0] is not None:
        samples = outcomes[0].numpy()
        kept["hits" if samples.dtype == bool else "values"] = (
            pack_hits(samples) if samples.dtype == bool else pack_values(samples)
        )
    divergences = getattr(outcome, "divergences", None)
    if divergences is not None:
        kept["kl"] = pack_values(divergences.numpy())
    return kept
