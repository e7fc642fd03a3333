"""How often the open loop's growth test calls a stable queue growing, with the trend from the
window's start (as before daf08e2) and from the lifetimes' p99 after the level's start (now):
simulated levels that start on a drained server, Poisson arrivals, each request in the system its
own lifetime (lognormal around ``--median`` seconds, ``--sigma``), the window opening when the
first request ends, judged by tuner.probes.load.open_loop_figures and SloTargets.violated with
the H100 space's targets (TTFT p99 <= 1 s) and horizon (420 s). A 10-s window is a search level
(broken only where the growth's whole interval lies above the critical growth), a longer one a
hold judged once at 70 s on the estimate. A queue served at 97 % of its arrivals (FIFO,
exponential service) shows that the test still sees a queue that grows.

``--holds``: the hold as the SLO probe runs it (tuner.probes.slo.SloProbe.hold_window: 60 s, looked
at every 10 s up to 180 s while the growth's interval spans the critical growth, then judged on
the estimate), with the trend from the lifetimes' p99.

    python scripts/growth_ramp_sim.py [--seeds 200] [--holds]
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
from tuner.space.schema import SloTargets

CASES = (  # window s, rate/s, lifetime sigma, service rate (None: no queue, each its own lifetime)
    (10, 24, 0.5, None), (10, 32, 1.0, None), (70, 24, 1.0, None), (10, 40, 0.5, 40 * 0.97), (70, 24, 0.5, 24 * 0.97),
)  # fmt: skip


def level_records(
    rate: float, sigma: float, service: float | None, seed: int, median: float, until: float
) -> list[RequestRecord]:
    rng, recs, free = random.Random(seed), [], 0.0
    for t in itertools.takewhile(lambda t: t < until, arrival_offsets(rate, seed)):
        if service is None:
            life = median * math.exp(rng.gauss(0.0, sigma))
        else:
            free = max(t, free) + rng.expovariate(service)
            life = free - t
        recs.append(RequestRecord(ok=True, started=t, sent=t, ttft=0.05, e2e=life, stamps=[t + 0.05, t + life]))
    return recs


def level(window: float, rate: float, sigma: float, service: float | None, seed: int, median: float) -> dict:
    recs = level_records(rate, sigma, service, seed, median, window + 30)
    start = min(r.ended for r in recs if r.ended is not None)
    summary = {
        **load.summarize(recs, start, start + window, 10, 2),
        **load.open_loop_figures(recs, start, start + window, rate, seed, 0.0),
    }
    return {**summary, "horizon_s": 420.0, "decisive": window > 10}


HOLDS = ((24, 1.0, None), (24, 0.5, None), (30, 1.0, None), (24, 0.5, 24 * 0.97), (30, 0.5, 30 * 0.99))


def hold(rate: float, sigma: float, service: float | None, seed: int, median: float, slo: SloTargets) -> tuple[bool, int]:
    """One simulated hold: (broke, its length in s). At each look the requests not yet ended are
    in flight (no lifetime), as a running level sees them."""
    recs = level_records(rate, sigma, service, seed, median, 210.0)
    start = min(r.ended for r in recs if r.ended is not None)
    for length in range(60, 181, 10):
        now = start + length
        seen = [
            r if r.ended is not None and r.ended < now else RequestRecord(ok=False, started=r.started, sent=r.sent)
            for r in recs
            if r.started < now
        ]
        f = {**load.summarize(seen, start, now, 10, 2), **load.open_loop_figures(seen, start, now, rate, seed, 0.0)}
        f = {**f, "horizon_s": 420.0, "decisive": True}
        growth, ci, critical = f["growth"], f["growth_ci"], slo.critical_growth(f)
        if critical is None or not growth - ci <= critical < growth + ci:
            break
    return any(b.startswith("requests in the system grew") for b in slo.violated(f)), length


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--median", type=float, default=0.6)
    ap.add_argument("--holds", action="store_true", help="the hold as the SLO probe runs it, instead of one look")
    args = ap.parse_args()
    slo = SloTargets(ttft_p99=1.0)
    if args.holds:
        print(f"{args.seeds} simulated holds each (60 s, to 180 s while undecided); lifetimes lognormal around {args.median} s")
        for rate, sigma, service in HOLDS:
            runs = [hold(rate, sigma, service, seed, args.median, slo) for seed in range(args.seeds)]
            queue = f"served at {service:.4g}/s" if service else f"sigma {sigma}"
            broke = sum(b for b, _ in runs)
            mean = sum(n for _, n in runs) / len(runs)
            print(f"  hold at {rate:g}/s, {queue}: broke on growth {broke}/{args.seeds}, {mean:.0f} s on average")
        return
    print(f"{args.seeds} simulated levels each; lifetimes lognormal around {args.median} s; covers 0: the growth's 95 % interval")
    for window, rate, sigma, service in CASES:
        row = []
        for name, quantile in (("window start", 0.0), ("lifetimes' p99", 0.99)):
            load.RAMP_QUANTILE = quantile
            covered = broke = 0
            for seed in range(args.seeds):
                f = level(window, rate, sigma, service, seed, args.median)
                covered += f["growth"] - f["growth_ci"] <= 0 <= f["growth"] + f["growth_ci"]
                broke += any(b.startswith("requests in the system grew") for b in slo.violated(f))
            row.append(f"{name}: covers 0 {100 * covered / args.seeds:3.0f} %, broke on growth {100 * broke / args.seeds:3.0f} %")
        queue = f"served at {service:.4g}/s" if service else f"sigma {sigma}"
        print(f"  {window:3.0f}-s level at {rate:g}/s, {queue}: " + " | ".join(row))


if __name__ == "__main__":
    main()
