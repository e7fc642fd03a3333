"""One JSON line per bench part of a goodput cross-check's folder (``bench-*.json``): its summary
without the per-request arrays (``ttfts``, ``itls``, ``start_times``...: 12 MB a part at 5 minutes),
so that every part's figures come back from the GPU host, whose $OUT returns 8 files.

    python scripts/bench_parts.py OUT/STUDY-bench-answer > OUT/STUDY-bench-answer-parts.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(path: Path) -> dict:
    """A part's result without its lists."""
    r = json.loads(path.read_text())
    return {"part": path.stem, **{k: v for k, v in r.items() if not isinstance(v, list)}}


if __name__ == "__main__":
    for part in sorted(Path(sys.argv[1]).glob("bench-*.json")):
        print(json.dumps(summary(part)))
