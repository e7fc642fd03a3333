"""How well the growth of requests in the system separates a stable queue from a slow one, by
window length: simulated queues (seeded), judged as the SLO probe judges them (tuner.base.stats.trend
over batches of two lifetimes, 4-10 of them). Prints, per queue and window: the slope's mean and
spread over the runs, the mean 95 % half-width the trend reports, and how often a search level
(interval above g*) and a hold (estimate above g*) would call it growing, for g* of a 10-minute
horizon with 0.6 s of TTFT headroom (docs/goodput.md).

    python benchmarks/growth_power.py [--runs 200]
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.base.stats import trend


def stable(rng: random.Random, rate: float, seconds: float, life: float = 2.5) -> tuple[list[float], list[float]]:
    """Each request in the system a lifetime of its own (a server below saturation: M/G/infinity)."""
    arrivals, t = [], 0.0
    while (t := t + rng.expovariate(rate)) < seconds:
        arrivals.append(t)
    return arrivals, sorted(a + life * rng.uniform(0.8, 1.2) for a in arrivals)


def slots(rng: random.Random, rate: float, seconds: float, busy: float, life: float = 2.5) -> tuple[list[float], list[float]]:
    """c slots, each a request for ``life`` seconds, c chosen so the slots serve ``busy`` x the rate (M/D/c)."""
    c = max(1, round(busy * rate * life))
    life = c / (busy * rate)
    arrivals, t = [], 0.0
    while (t := t + rng.expovariate(rate)) < seconds:
        arrivals.append(t)
    free = [0.0] * c
    ends = []
    for a in arrivals:
        start = max(a, heapq.heappop(free))
        ends.append(start + life)
        heapq.heappush(free, start + life)
    return arrivals, sorted(ends)


def in_system(arrivals: list[float], ends: list[float]) -> Callable[[float], int]:
    return lambda t: bisect.bisect_left(arrivals, t) - bisect.bisect_left(ends, t)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    rate, warm, critical = 60.0, 20.0, 60.0 * 0.6 / 600  # g* = completions x headroom / horizon
    queues = {
        "stable (M/G/inf)": lambda rng, s: stable(rng, rate, s),
        "80 % busy (M/D/c)": lambda rng, s: slots(rng, rate, s, 1 / 0.8),
        "97 % of arrivals served (M/D/c)": lambda rng, s: slots(rng, rate, s, 0.97),
    }
    print(f"{rate:g} requests/s, lifetimes 2.5 s, g* = {critical:.3f}/s; {args.runs} runs each")
    print("queue | window | slope mean | slope SD | reported half-width | search: growing | hold: growing")
    for name, make in queues.items():
        for seconds in (60.0, 120.0, 180.0):
            found = []
            for run in range(args.runs):
                arrivals, ends = make(random.Random(run), warm + seconds)
                batches = max(4, min(10, int(seconds / 5.0)))
                got = trend(in_system(arrivals, ends), warm, warm + seconds, batches)
                assert got is not None
                found.append(got)
            slopes = [g.slope for g in found]
            search = sum(g.low > critical for g in found) / len(found)
            hold = sum(g.slope > critical for g in found) / len(found)
            print(
                f"{name} | {seconds:.0f} s | {statistics.fmean(slopes):+.3f} | {statistics.stdev(slopes):.3f} | "
                f"{statistics.fmean(g.half_width for g in found):.3f} | {search:.0%} | {hold:.0%}"
            )


if __name__ == "__main__":
    main()
