"""How fast an SGLang server decoded, from its own log: per band of running requests, the median
time per decode step (running requests / the "gen throughput (token/s)" of each "Decode batch"
line), so two hosts compare on what the engine did and not only on a Python loop
(scripts/same_host.py). Where a host differs here, a stored answer does not carry over to it.

    python3 scripts/sglang_steps.py docs/data/goodput/h100-sglang-2026-12-06e/tune/server.log.xz \\
        docs/data/goodput/h100-sglang-2026-12-07/tune/server.log.xz

The throughput SGLang logs is averaged over its log interval, prefills included, so a step here is
an upper bound on the pure decode step; compare logs of the same space and load only.

`--every S` prints each log's timeline instead, S seconds a row from its first batch: prefill and
decode batch lines, the running requests (mean, max) and queued (max) the decode lines logged, and
how many of them ran without CUDA graphs. SGLang logs a decode line every `decode_log_interval` (40)
steps, so fewer decode lines a row at the same load means slower steps: where running requests pass
`cuda-graph-max-bs` and stay there, the server has tipped into its slow state.

    python3 scripts/sglang_steps.py --every 15 docs/data/goodput/h100-sglang-2026-12-07c/confirm/server.log.xz"""

from __future__ import annotations

import argparse
import lzma
import re
import statistics
from pathlib import Path

LINE = re.compile(r"Decode batch.*?#running-req: (\d+).*?gen throughput \(token/s\): ([\d.]+)")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d )?(\d\d):(\d\d):(\d\d)")
BATCH = re.compile(r"(Prefill|Decode) batch.*?#running-req: (\d+)(?:.*?cuda graph: (\w+))?.*?#queue-req: (\d+)")
BANDS = (8, 16, 32, 64, 128, 192, 256, 512, 1024)


def steps(path: Path) -> dict[int, list[float]]:
    """Milliseconds per decode step by band (the band's upper bound of running requests)."""
    found: dict[int, list[float]] = {}
    with _open(path) as log:
        for line in log:
            if (m := LINE.search(line)) is None or float(m.group(2)) <= 0:
                continue
            running = int(m.group(1))
            band = next((b for b in BANDS if running <= b), BANDS[-1])
            found.setdefault(band, []).append(running / float(m.group(2)) * 1000.0)
    return found


def _open(path: Path):
    return lzma.open(path, "rt", errors="replace") if path.suffix == ".xz" else open(path, errors="replace")


def timeline(path: Path, every: float) -> list[str]:
    """One row per `every` seconds from the log's first batch line (see the module's doc)."""
    rows: dict[int, dict[str, list[int]]] = {}
    first: float | None = None
    with _open(path) as log:
        for line in log:
            if (m := BATCH.search(line)) is None or (t := STAMP.search(line)) is None:
                continue
            day = t.group(1) or ""
            seconds = int(t.group(2)) * 3600 + int(t.group(3)) * 60 + int(t.group(4))
            seconds += 86400 * (int(day[8:10]) if day else 0)
            first = seconds if first is None else first
            row = rows.setdefault(int((seconds - first) // every), {"P": [], "D": [], "Q": [], "eager": []})
            row["Q"].append(int(m.group(4)))
            if m.group(1) == "Prefill":
                row["P"].append(1)
                continue
            row["D"].append(int(m.group(2)))
            row["eager"].append(int(m.group(3) == "False"))
    out = [f"{'from s':>7}  {'prefill':>7}  {'decode':>6}  {'running':>13}  {'queued max':>10}  {'eager':>5}"]
    for k in sorted(rows):
        r = rows[k]
        running = f"{statistics.fmean(r['D']):5.1f} max {max(r['D']):3d}" if r["D"] else f"{'-':>13}"
        out.append(
            f"{k * every:7.0f}  {len(r['P']):7d}  {len(r['D']):6d}  {running:>13}  {max(r['Q']):10d}  {sum(r['eager']):5d}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", type=Path, nargs="+", help="SGLang server logs (.log or .log.xz)")
    parser.add_argument("--every", type=float, help="print each log's timeline, a row every this many seconds")
    args = parser.parse_args(argv)
    if args.every:
        for p in args.logs:
            print(p)
            print("\n".join(timeline(p, args.every)))
        return 0
    tables = [steps(p) for p in args.logs]
    print("running<=  " + "  ".join(f"{p.parent.parent.name[-15:] + '/' + p.parent.name:>24}" for p in args.logs))
    for band in BANDS:
        cells = [f"{statistics.median(t[band]):8.2f} ms (n={len(t[band]):4d})" if t.get(band) else f"{'-':>24}" for t in tables]
        if any(band in t for t in tables):
            print(f"{band:9d}  " + "  ".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
