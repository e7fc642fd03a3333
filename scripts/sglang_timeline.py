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
import statistics
import sys
from collections import defaultdict
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.engines.sglang import DecodeStep, decode_steps


def step_times(steps: list[DecodeStep], width: int = 8) -> dict[int, list[float]]:
    """Milliseconds per decode step, by the bin of requests running it was logged at (2 or more
    running; a bin's key is its lowest count, the last bin open: 64 and over)."""
    bins: dict[int, list[float]] = defaultdict(list)
    for step in steps:
        if step.running >= 2 and step.step_ms is not None:
            bins[min(step.running // width * width, 64)].append(step.step_ms)
    return bins


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log", type=Path)
    ap.add_argument("--every", type=int, default=30, help="seconds per row")
    ap.add_argument("--steps", action="store_true", help="the decode step's time by requests running, not the timeline")
    args = ap.parse_args()
    lines = args.log.read_text(errors="replace").splitlines()
    if args.steps:
        print(f"SGLang's decode step by requests running, {args.log.name} (median ms over 40 steps, lines):")
        for low, times in sorted(step_times(decode_steps(lines)).items()):
            if len(times) >= 5:
                print(f"  {low:3d}-{low + 7:3d} running: {statistics.median(times):5.2f} ms ({len(times)} lines)")
        return
    ready = next((datetime.strptime(line[1:20], "%Y-%m-%d %H:%M:%S") for line in lines if "fired up" in line), None)
    if ready is None:
        sys.exit(f"{args.log}: no 'fired up' line: the server never became ready")
    rows: dict[int, list[DecodeStep]] = defaultdict(list)
    for step in decode_steps(lines):
        if step.at >= ready:
            rows[int((step.at - ready).total_seconds()) // args.every].append(step)
    print(f"SGLang's Decode batch lines of {args.log.name} (server ready {ready:%H:%M:%S}), per {args.every} s:")
    for k in sorted(rows):
        running = [s.running for s in rows[k]]
        print(
            f"{k * args.every:5d}-{(k + 1) * args.every:5d} s: running mean {sum(running) / len(running):5.1f} "
            f"max {max(running):3d}, queue max {max(s.queued for s in rows[k]):3d}, {len(running)} decode logs"
        )


if __name__ == "__main__":
    main()
