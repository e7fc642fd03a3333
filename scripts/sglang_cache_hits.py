"""SGLang's own count of its prefix cache, from its server log: the `Prefill batch` lines
(#new-seq, #new-token, #cached-token) summed per phase of load, phases split where no prefill
ran for ``--gap`` seconds (a drain, the next client's start). The hit rate is cached tokens over
all prompt tokens prefilled in the phase.

    python scripts/sglang_cache_hits.py server.log[.gz] [--gap 10]
"""

from __future__ import annotations

import argparse
import gzip
import re
from datetime import datetime
from pathlib import Path

PREFILL = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] Prefill batch, #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log", type=Path)
    ap.add_argument("--gap", type=float, default=10.0, help="seconds without a prefill that end a phase")
    args = ap.parse_args()
    raw = gzip.decompress(args.log.read_bytes()) if args.log.suffix == ".gz" else args.log.read_bytes()
    phases: list[list[tuple[datetime, int, int, int]]] = []
    for line in raw.decode(errors="replace").splitlines():
        if m := PREFILL.match(line):
            row = (datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S"), int(m[2]), int(m[3]), int(m[4]))
            if not phases or (row[0] - phases[-1][-1][0]).total_seconds() >= args.gap:
                phases.append([])
            phases[-1].append(row)
    for part in phases:
        seqs, new, cached = (sum(r[i] for r in part) for i in (1, 2, 3))
        hit = cached / (new + cached) if new + cached else 0.0
        print(
            f"{part[0][0]:%H:%M:%S}-{part[-1][0]:%H:%M:%S}: {seqs} sequences, {new + cached:,} prompt tokens, "
            f"{cached:,} from the cache ({hit:.1%})"
        )


if __name__ == "__main__":
    main()
