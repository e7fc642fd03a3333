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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["BatchMeans", "Trend", "batch_means", "count_in", "percentiles", "t975", "trend"]

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


@dataclass(frozen=True)
class Trend:
    """The least-squares slope of a quantity over a window, per second, from its batch means,
    with the 95 % half-width of that slope (Student-t, ``batches`` - 2 degrees of freedom)."""

    slope: float
    half_width: float
    batches: int
    seconds: float

    @property
    def low(self) -> float:
        return self.slope - self.half_width

    @property
    def high(self) -> float:
        return self.slope + self.half_width


def trend(value_at: Callable[[float], float], start: float, end: float, batches: int, points: int = 50) -> Trend | None:
    """The trend of a step function ``value_at(t)`` over ``[start, end)`` (None: under 3 batches or
    an empty window). Each of ``batches`` equal sub-windows gives the function's mean (``points``
    samples); the slope is the least-squares line through those means at the sub-windows' middles.

    Batch means of a stationary quantity are nearly independent when each sub-window is longer
    than the quantity's correlation time (for requests in a system: a request's lifetime), and so
    are the line's residuals: its standard error is then right (checked against simulated
    queues in tests/test_stats.py). For a quantity that wanders as a random walk (a queue at or past
    saturation) the residuals are correlated and the interval is too narrow; a caller that must
    not call such a quantity flat judges on the slope itself once the window is long."""
    if end <= start or batches < 3:
        return None
    width = (end - start) / batches
    mids, means = [], []
    for i in range(batches):
        a = start + i * width
        means.append(sum(value_at(a + width * (j + 0.5) / points) for j in range(points)) / points)
        mids.append(a + width / 2)
    x_mean, y_mean = statistics.fmean(mids), statistics.fmean(means)
    sxx = sum((x - x_mean) ** 2 for x in mids)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(mids, means, strict=True)) / sxx
    rss = sum((y - y_mean - slope * (x - x_mean)) ** 2 for x, y in zip(mids, means, strict=True))
    se = math.sqrt(rss / (batches - 2) / sxx)
    return Trend(slope, t975(batches - 2) * se, batches, end - start)


def percentiles(values: Sequence[float], pcts: Iterable[int]) -> dict[int, float | None]:
    pcts = list(pcts)
    if not len(values):
        return {p: None for p in pcts}
    found = np.percentile(np.asarray(values, dtype=float), pcts)
    return {p: float(v) for p, v in zip(pcts, found, strict=True)}
