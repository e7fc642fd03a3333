"""SGLang's own view of a load, from its server log: the `Decode batch` lines (requests running
and queued, written every 40 decode steps) per window of seconds after the server was ready.

    python scripts/sglang_timeline.py server.log [--every 30]
    python scripts/sglang_timeline.py server.log --steps     # the decode step's time by requests running

``--steps``: each line's requests running over its generation throughput is the mean time of one
decode step over the last 40 (prefill batches between them included), binned by requests running
(medians, bins of 8 with at least 5 lines): two loads compare at equal batch.
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] ")
DECODE = re.compile(r"Decode batch, #running-req: (\d+),.*#queue-req: (\d+)")
THROUGHPUT = re.compile(r"Decode batch, #running-req: (\d+),.*gen throughput \(token/s\): ([\d.]+)")


def step_times(lines: list[str], width: int = 8) -> dict[int, list[float]]:
    """Milliseconds per decode step, by the bin of requests running it was logged at (2 or more
    running; a bin's key is its lowest count, the last bin open: 64 and over)."""
    bins: dict[int, list[float]] = defaultdict(list)
    for line in lines:
        if (m := THROUGHPUT.search(line)) and (running := int(m.group(1))) >= 2 and (rate := float(m.group(2))) > 0:
            bins[min(running // width * width, 64)].append(1000 * running / rate)
    return bins


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log", type=Path)
    ap.add_argument("--every", type=int, default=30, help="seconds per row")
    ap.add_argument("--steps", action="store_true", help="the decode step's time by requests running, not the timeline")
    args = ap.parse_args()
    if args.steps:
        print(f"SGLang's decode step by requests running, {args.log.name} (median ms over 40 steps, lines):")
        for low, times in sorted(step_times(args.log.read_text(errors="replace").splitlines()).items()):
            if len(times) >= 5:
                print(f"  {low:3d}-{low + 7:3d} running: {statistics.median(times):5.2f} ms ({len(times)} lines)")
        return
    ready: datetime | None = None
    rows: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for line in args.log.read_text(errors="replace").splitlines():
        if not (stamp := STAMP.match(line)):
            continue
        at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
        if ready is None:
            if "fired up" in line:
                ready = at
            continue
        if decode := DECODE.search(line):
            rows[int((at - ready).total_seconds()) // args.every].append((int(decode.group(1)), int(decode.group(2))))
    print(f"SGLang's Decode batch lines of {args.log.name} (server ready {ready:%H:%M:%S}), per {args.every} s:")
    for k in sorted(rows):
        running = [r for r, _ in rows[k]]
        print(
            f"{k * args.every:5d}-{(k + 1) * args.every:5d} s: running mean {sum(running) / len(running):5.1f} "
            f"max {max(running):3d}, queue max {max(q for _, q in rows[k]):3d}, {len(running)} decode logs"
        )


if __name__ == "__main__":
    main()
