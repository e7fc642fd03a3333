"""vLLM's own view of a load, from its server log: the engine's stats line (written every 10 s:
requests running and waiting, the KV cache in use) per window of seconds from the first line
with a request running, where the load began.

    python scripts/vllm_timeline.py server.log [--every 60]

Near the KV pool's limit a queue shows here first: requests wait while the cache is full, and
their TTFT (not the decode) breaks the SLO (docs/goodput.md, fifteenth session).
"""

from __future__ import annotations

import argparse
import lzma
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

STATS = re.compile(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) .*Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([\d.]+)%")


@dataclass(frozen=True)
class Stats:
    at: datetime
    running: int
    waiting: int
    kv_used: float  # percent


def stats_lines(lines: list[str]) -> list[Stats]:
    """The engine's stats lines of a log, in order (the log's dates carry no year: 1900's)."""
    found = []
    for line in lines:
        if m := STATS.search(line):
            at = datetime.strptime(m[1], "%m-%d %H:%M:%S")
            found.append(Stats(at, int(m[2]), int(m[3]), float(m[4])))
    return found


def windows(stats: list[Stats], every: int) -> dict[int, list[Stats]]:
    """The stats lines by window of ``every`` seconds from the first with a request running."""
    first = next((s.at for s in stats if s.running > 0), None)
    rows: dict[int, list[Stats]] = defaultdict(list)
    for s in stats:
        if first is not None and s.at >= first:
            rows[int((s.at - first).total_seconds()) // every].append(s)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log", type=Path, help="a vLLM server log (.xz read as such)")
    ap.add_argument("--every", type=int, default=60, help="seconds per row")
    args = ap.parse_args()
    raw = lzma.decompress(args.log.read_bytes()) if args.log.suffix == ".xz" else args.log.read_bytes()
    rows = windows(stats_lines(raw.decode(errors="replace").splitlines()), args.every)
    if not rows:
        sys.exit(f"{args.log}: no stats line with a request running: the load never reached the engine")
    print(f"vLLM's stats lines of {args.log.name}, per {args.every} s from the first with a request running:")
    for k in sorted(rows):
        r = rows[k]
        running = [s.running for s in r]
        print(
            f"{k * args.every:5d}-{(k + 1) * args.every:5d} s: running mean {sum(running) / len(running):5.1f} "
            f"max {max(running):3d}, waiting max {max(s.waiting for s in r):3d} (in {sum(s.waiting > 0 for s in r)} of "
            f"{len(r)} lines), KV cache used max {max(s.kv_used for s in r):5.1f}%"
        )


if __name__ == "__main__":
    main()
