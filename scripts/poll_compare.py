"""Does llama-server's busy-waiting (``--poll``, default 50) help the embedded default? Its baseline
config as a whole trial on fresh servers, server flag ``poll`` A and B interleaved (A B, B A, ...),
alone and, with ``--beside N``, beside N single-thread busy loops (what other tests, or the tuner's
own client and Ray, are to a server on 2 cores): the objective, the probes' time, and the CPU-seconds
the server and this process's children used.

    python scripts/poll_compare.py --rounds 3 --polls 50,0 --beside 1 --json docs/data/suite/poll.json

Run it on an otherwise idle machine: it measures noise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from window_cap import interleaved

from tuner import space as spaces
from tuner.app import prepare
from tuner.server import end_servers_on_sigterm


def with_poll(space: spaces.SearchSpace, poll: int) -> spaces.SearchSpace:
    server = space.server.model_copy(update={"flags": {**space.server.flags, "poll": poll}})
    return space.model_copy(update={"server": server})


def _spin(stop: Any) -> None:
    while not stop.is_set():
        sum(range(10_000))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="cpu-llamacpp")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--polls", default="50,0")
    ap.add_argument("--beside", type=int, default=0, help="busy single-thread processes beside the server")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    end_servers_on_sigterm()  # `timeout` or a kill must not leave a server behind
    base, _ = prepare.load(args.space)
    params = dict(base.enqueue[0])
    variants = {str(int(p)): with_poll(base, int(p)) for p in args.polls.split(",")}

    def save(runs: dict[str, list[dict[str, Any]]]) -> None:
        if args.json:
            args.json.write_text(json.dumps({"space": args.space, "beside": args.beside, "runs": runs}, indent=2) + "\n")

    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.beside)]
    for s in spinners:
        s.start()
    try:
        runs = interleaved(variants, params, args.rounds, lambda key: f"poll {key}", save)
    finally:
        stop.set()
        for s in spinners:
            s.join(5)
    for poll, rows in runs.items():
        g = [row["goodput"] for row in rows]
        cpu = statistics.fmean(r["children_cpu_s"] for r in rows)
        print(
            f"poll {poll} ({args.beside} busy beside): slo.goodput {statistics.fmean(g):.1f} +- "
            f"{statistics.stdev(g) if len(g) > 1 else float('nan'):.1f} (SD, n={len(g)}), probes "
            f"{statistics.fmean(r['probe_s'] for r in rows):.0f} s, server CPU {cpu:.0f} s a trial"
        )
    return runs


if __name__ == "__main__":
    main()
