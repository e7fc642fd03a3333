"""How fast an SGLang server decoded, from its own log: per band of running requests, the median
time per decode step (running requests / the "gen throughput (token/s)" of each "Decode batch"
line), so two hosts compare on what the engine did and not only on a Python loop
(scripts/same_host.py). Where a host differs here, a stored answer does not carry over to it.

    python3 scripts/sglang_steps.py docs/data/goodput/h100-sglang-2026-12-06e/tune/server.log.xz \\
        docs/data/goodput/h100-sglang-2026-12-07/tune/server.log.xz

The throughput SGLang logs is averaged over its log interval, prefills included, so a step here is
an upper bound on the pure decode step; compare logs of the same space and load only."""

from __future__ import annotations

import argparse
import lzma
import re
import statistics
from pathlib import Path

LINE = re.compile(r"Decode batch.*?#running-req: (\d+).*?gen throughput \(token/s\): ([\d.]+)")
BANDS = (8, 16, 32, 64, 128, 192, 256, 512, 1024)


def steps(path: Path) -> dict[int, list[float]]:
    """Milliseconds per decode step by band (the band's upper bound of running requests)."""
    opener = lzma.open if path.suffix == ".xz" else open
    found: dict[int, list[float]] = {}
    with opener(path, "rt", errors="replace") as log:
        for line in log:
            if (m := LINE.search(line)) is None or float(m.group(2)) <= 0:
                continue
            running = int(m.group(1))
            band = next((b for b in BANDS if running <= b), BANDS[-1])
            found.setdefault(band, []).append(running / float(m.group(2)) * 1000.0)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", type=Path, nargs="+", help="SGLang server logs (.log or .log.xz)")
    args = parser.parse_args(argv)
    tables = [steps(p) for p in args.logs]
    print("running<=  " + "  ".join(f"{p.parent.parent.name:>24}" for p in args.logs))
    for band in BANDS:
        cells = [f"{statistics.median(t[band]):8.2f} ms (n={len(t[band]):4d})" if t.get(band) else f"{'-':>24}" for t in tables]
        if any(band in t for t in tables):
            print(f"{band:9d}  " + "  ".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
