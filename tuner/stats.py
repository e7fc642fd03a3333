"""Statistics of measurements: percentiles, Student-t quantiles, and the steady-state window
arithmetic the load probe counts with (tokens by their stream timestamps, batch-means CIs); read
by the probes, the noise floor and the telemetry.

Percentiles are numpy's (linear interpolation between closest ranks); None for no samples.

A closed-loop level has a ramp (every client's first request starts at once: a burst of
prefills) and a drain (the last requests finish while no new ones start). Neither is the
steady state the server holds under constant concurrency, so throughput is counted only inside
a window ``[start, end]``: each streamed token counts when it arrived, whatever request it
belongs to. The window is split into ``batches`` equal sub-windows; their throughputs are
treated as independent samples (batch means) and give a Student-t confidence interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BatchMeans", "batch_means", "count_in", "percentiles", "t975"]

# Two-sided 95 % Student-t quantiles for 1..30 degrees of freedom (then the normal's 1.96 plus
# the first term of the Cornish-Fisher expansion).
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df)


@dataclass(frozen=True)
class BatchMeans:
    """A rate measured over a window as ``len(rates)`` sub-window rates."""

    rates: tuple[float, ...]
    seconds: float

    @property
    def mean(self) -> float:
        return statistics.fmean(self.rates) if self.rates else 0.0

    @property
    def half_width(self) -> float | None:
        """Half-width of the 95 % CI of the mean; None from fewer than two batches, or when every
        batch counted exactly the same (a steady decode split into few sub-windows: a spread of
        zero is no evidence of certainty, and claiming +-0 would stop a level at once)."""
        if len(self.rates) < 2 or len(set(self.rates)) == 1:
            return None
        return t975(len(self.rates) - 1) * statistics.stdev(self.rates) / math.sqrt(len(self.rates))

    @property
    def relative_half_width(self) -> float | None:
        hw = self.half_width
        if hw is None or self.mean <= 0:
            return None
        return hw / self.mean


def count_in(stamps: Sequence[float], start: float, end: float) -> int:
    """How many of ``stamps`` (ascending) fall in ``[start, end)``."""
    from bisect import bisect_left

    return bisect_left(stamps, end) - bisect_left(stamps, start)


def batch_means(streams: Sequence[tuple[Sequence[float], float]], start: float, end: float, batches: int) -> BatchMeans:
    """Token rate in ``[start, end)`` from ``streams`` of (ascending arrival stamps, tokens per stamp).

    ``tokens per stamp`` is the server's completion-token count over the number of streamed
    chunks (1.0 when each chunk carries one token)."""
    if end <= start or batches < 1:
        return BatchMeans((), 0.0)
    width = (end - start) / batches
    edges = [start + i * width for i in range(batches)] + [end]
    counts = [0.0] * batches
    for stamps, weight in streams:
        if not stamps or stamps[-1] < start or stamps[0] >= end:
            continue
        for i in range(batches):
            counts[i] += weight * count_in(stamps, edges[i], edges[i + 1])
    return BatchMeans(tuple(c / width for c in counts), end - start)


def percentiles(values: Sequence[float], pcts: Iterable[int]) -> dict[int, float | None]:
    pcts = list(pcts)
    if not len(values):
        return {p: None for p in pcts}
    found = np.percentile(np.asarray(values, dtype=float), pcts)
    return {p: float(v) for p, v in zip(pcts, found, strict=True)}
