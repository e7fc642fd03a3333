"""How often tests/probes/test_open_loop.py's overload test would miss its growth assertion
(``growth - growth_ci > 0.5 * achieved_rate - completion_rate``) on a machine of a given speed:
simulated levels on a 2-slot FIFO server whose solo capacity is ``c`` requests/s (2 / a solo
lifetime) and that completes ``--efficiency`` of it with both slots busy (1.3 solo, 0.83 loaded
on the CI machine where the test failed), Poisson arrivals at ``k * c``, the window opening when
the first request ends, judged by tuner.probes.load.open_loop_figures. Rows: the old test (4x, 6 s)
and the new one (8x, OVERLOAD_REQUESTS / c seconds within 6-30 s).

    python scripts/overload_growth_sim.py [--seeds 2000]
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tuner.probes.load as load
from tuner.probes import RequestRecord, arrival_offsets


def level(capacity: float, k: float, seconds: float, efficiency: float, seed: int) -> dict[str, float]:
    rng, recs, slots = random.Random(seed), [], [0.0, 0.0]
    busy = 2 / (efficiency * capacity)  # a request's time in a slot with both slots busy
    for t in itertools.takewhile(lambda t: t < seconds + 60, arrival_offsets(k * capacity, seed)):
        free = min(slots)
        done = max(t, free) + busy * math.exp(rng.gauss(0.0, 0.2))
        slots[slots.index(free)] = done
        recs.append(RequestRecord(ok=True, started=t, sent=t, ttft=done - t - 0.1, e2e=done - t, stamps=[done - 0.1, done]))
    start = min(r.ended for r in recs if r.ended is not None)
    return load.open_loop_figures(recs, start, start + seconds, k * capacity, seed, 0.0)


def missed(f: dict[str, float]) -> bool:
    return not f["growth"] - f["growth_ci"] > 0.5 * f["achieved_rate"] - f["completion_rate"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=2000)
    ap.add_argument("--efficiency", type=float, default=0.62)
    ap.add_argument("--requests", type=float, default=30.0, help="OVERLOAD_REQUESTS: capacity x window")
    args = ap.parse_args()
    print(f"{args.seeds} simulated levels each; both slots busy complete {args.efficiency:g} of the solo capacity")
    for capacity in (1.0, 1.33, 2.0, 3.0, 4.0):
        new = min(max(args.requests / capacity, 6.0), 30.0)
        row = []
        for k, seconds in ((4, 6.0), (8, new)):
            misses = sum(missed(level(capacity, k, seconds, args.efficiency, seed)) for seed in range(args.seeds))
            row.append(f"{k}x for {seconds:4.1f} s: missed {100 * misses / args.seeds:5.2f} %")
        print(f"  solo capacity {capacity:4.2f}/s: " + " | ".join(row))


if __name__ == "__main__":
    main()
