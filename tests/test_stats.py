"""The trend of requests in the system (tuner.base.stats.trend): its interval is right for a stable
queue and shows a growing one. Queues are simulated from a seeded random stream: Poisson
arrivals, each request in the system a fixed lifetime (a server below saturation: M/D/infinity)
or served one after another at 97 % of the arrival rate (a slow queue that grows)."""

from __future__ import annotations

import bisect
import random

import pytest

from tuner.base.stats import trend


def _queue(
    rate: float, seconds: float, seed: int, *, life: float = 2.0, service: float | None = None
) -> tuple[list[float], list[float]]:
    """(arrivals, ends) of ``seconds`` of Poisson arrivals at ``rate``: each in the system ``life``
    seconds, or (``service``) served first in, first out at ``service`` per second."""
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    while (t := t + rng.expovariate(rate)) < seconds:
        arrivals.append(t)
    if service is None:
        return arrivals, sorted(a + life * rng.uniform(0.8, 1.2) for a in arrivals)
    ends, free = [], 0.0
    for a in arrivals:
        free = max(a, free) + 1 / service
        ends.append(free)
    return arrivals, ends


def _growth(arrivals: list[float], ends: list[float], start: float, end: float, batches: int = 8) -> tuple[float, float]:
    found = trend(lambda t: bisect.bisect_left(arrivals, t) - bisect.bisect_left(ends, t), start, end, batches)
    assert found is not None
    return found.slope, found.half_width


def test_a_stable_queue_s_interval_covers_no_growth_about_95_percent_of_the_time() -> None:
    covered = 0
    for seed in range(100):
        slope, hw = _growth(*_queue(60.0, 100.0, seed), 20.0, 100.0)
        covered += slope - hw <= 0.0 <= slope + hw
    assert 85 <= covered <= 100, covered  # 95 % nominal; 100 runs


def test_a_queue_served_at_97_percent_of_its_arrivals_grows_and_its_interval_says_so() -> None:
    shown = 0
    for seed in range(20):
        slope, hw = _growth(*_queue(100.0, 140.0, seed, service=97.0), 20.0, 140.0)
        assert slope > 0.5, (seed, slope)  # 3 a second: the estimate never says it is flat
        shown += slope - hw > 0
    assert shown >= 17, shown


def test_no_trend_from_fewer_than_three_batches_or_an_empty_window() -> None:
    assert trend(lambda t: t, 0.0, 10.0, 2) is None
    assert trend(lambda t: t, 5.0, 5.0, 8) is None
    line = trend(lambda t: 3.0 * t, 0.0, 10.0, 5)
    assert line is not None and line.slope == pytest.approx(3.0, rel=0.02) and line.half_width == pytest.approx(0.0, abs=1e-6)
