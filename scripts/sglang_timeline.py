"""SGLang's own view of a load, from its server log: the `Decode batch` lines (requests running
and queued, written every 40 decode steps) per window of seconds after the server was ready.

    python scripts/sglang_timeline.py server.log [--every 30]
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] ")
DECODE = re.compile(r"Decode batch, #running-req: (\d+),.*#queue-req: (\d+)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log", type=Path)
    ap.add_argument("--every", type=int, default=30, help="seconds per row")
    args = ap.parse_args()
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
