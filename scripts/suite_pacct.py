"""Where a test run's CPU went, exactly: the kernel's process accounting (every process that ended,
short-lived ones included), by kind and by test.

    apt-get install -y acct && accton /tmp/pacct          # before the run; `accton off` after it
    python scripts/suite_pacct.py records /tmp/pacct > records.csv     # the raw records, as CSV
    python scripts/suite_pacct.py report records.csv [TIMELINE.jsonl]

A record is written when a process ends: its pid, parent, start (whole seconds), run time and CPU
(user + system) of all its threads. Its name is the last thread's (Ray's processes end under a
thread's name: "grpc_global_tim", "PipeReaderThd"), so kinds are only llama-server, postgres, pip,
mypy and Python/Ray (the rest). With a timeline from scripts/suite_timeline.py, each process is put
under its xdist worker's test that overlaps its life most (a worker is a child of the pytest
process; gw0, gw1, ... in the order they started); one reparented to init (a daemonised Ray
node, a server whose parent died) is "(no worker)".
"""

from __future__ import annotations

import collections
import csv
import json
import struct
import sys
from pathlib import Path

FIELDS = ("pid", "ppid", "start", "elapsed_s", "cpu_s", "name")
LLAMA, OTHER = "llama-server", "python/ray/other"


def _comp_t(value: int) -> int:  # 13-bit mantissa, 3-bit base-8 exponent (linux/acct.h)
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def records(path: Path) -> list[dict[str, object]]:
    """struct acct_v3: 64 bytes each; times in AHZ (100) ticks."""
    data, out = path.read_bytes(), []
    for at in range(0, len(data) - 63, 64):
        raw = data[at : at + 64]
        fields = struct.unpack("<BBHIIIIIIfHHHHHHHH", raw[:48])
        if fields[1] != 3:
            raise SystemExit(f"{path}: record {at // 64} is version {fields[1]}, not acct_v3")
        out.append(
            {
                "pid": fields[6],
                "ppid": fields[7],
                "start": fields[8],
                "elapsed_s": round(fields[9] / 100, 2),
                "cpu_s": (_comp_t(fields[10]) + _comp_t(fields[11])) / 100,
                "name": raw[48:64].split(b"\0")[0].decode(errors="replace"),
            }
        )
    return out


def kind(name: str) -> str:
    return name if name in (LLAMA, "postgres", "pip", "mypy") else OTHER


def report(rows: list[dict[str, object]], timeline: Path | None) -> None:
    by_kind: collections.Counter[str] = collections.Counter()
    for row in rows:
        by_kind[kind(str(row["name"]))] += float(row["cpu_s"])  # type: ignore[arg-type]
    total = sum(by_kind.values())
    print(f"# {len(rows)} processes, {total:.1f} CPU-s")
    for name, cpu in by_kind.most_common():
        print(f"{cpu:8.1f} CPU-s {cpu / total:6.1%}  {name}")
    if timeline is None:
        return
    tests = [json.loads(line) for line in timeline.read_text().splitlines() if '"test"' in line]
    by_pid = {int(r["pid"]): r for r in rows}  # type: ignore[call-overload]
    t0, t1 = min(t["start"] for t in tests), max(t["end"] for t in tests)
    # the xdist workers: processes that lived through the tests, whose parent has two or more of them
    long = [r for r in rows if int(r["start"]) <= t0 and int(r["start"]) + float(r["elapsed_s"]) >= t1 - 2]  # type: ignore[call-overload, arg-type]
    siblings = collections.Counter(int(r["ppid"]) for r in long)  # type: ignore[call-overload]
    parent = max(siblings, key=lambda p: (siblings[p], -p))
    pids = sorted(int(r["pid"]) for r in long if int(r["ppid"]) == parent)  # type: ignore[call-overload]
    workers = {pid: f"gw{i}" for i, pid in enumerate(pids)}
    by_worker = collections.defaultdict(list)
    for t in tests:
        by_worker[t["worker"]].append(t)

    def worker_of(row: dict[str, object]) -> str | None:
        seen, at = 0, row
        while at is not None and seen < 40:
            if int(at["ppid"]) in workers:  # type: ignore[call-overload]
                return workers[int(at["ppid"])]  # type: ignore[call-overload]
            at, seen = by_pid.get(int(at["ppid"])), seen + 1  # type: ignore[call-overload, assignment]
        return None

    per_test: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        if int(row["pid"]) in workers or int(row["start"]) + float(row["elapsed_s"]) < t0 - 1:  # type: ignore[call-overload, arg-type]
            continue  # the workers' own CPU is in the timeline (cpu_self); what ended before the tests
        gw = worker_of(row)
        if gw is None:
            per_test["(no worker)"][kind(str(row["name"]))] += float(row["cpu_s"])  # type: ignore[arg-type]
            continue
        a = int(row["start"])  # type: ignore[call-overload]
        b = a + float(row["elapsed_s"])  # type: ignore[arg-type]
        test = max(by_worker[gw], key=lambda t: min(b, t["end"]) - max(a, t["start"]))
        per_test[test["test"]][kind(str(row["name"]))] += float(row["cpu_s"])  # type: ignore[arg-type]
    for t in tests:
        per_test[t["test"]]["in the worker"] += t["cpu_self"]
    during = [r for r in rows if int(r["start"]) + float(r["elapsed_s"]) >= t0 - 1]  # type: ignore[call-overload, arg-type]
    cpu_during = sum(float(r["cpu_s"]) for r in during)  # type: ignore[arg-type]
    own = sum(float(r["cpu_s"]) for r in rows if int(r["pid"]) in workers)  # type: ignore[call-overload, arg-type]
    print(
        f"# the tests ({t1 - t0:.0f} s): {cpu_during:.1f} CPU-s in the processes that ended during them "
        f"({own:.1f} in the xdist workers themselves), {cpu_during / (t1 - t0):.2f} cores busy on average"
    )
    kinds: collections.Counter[str] = collections.Counter()
    for r in during:
        kinds[kind(str(r["name"]))] += float(r["cpu_s"])  # type: ignore[arg-type]
    print("#   of which " + ", ".join(f"{name} {cpu:.1f} ({cpu / cpu_during:.0%})" for name, cpu in kinds.most_common()))
    print(f"# by test: the processes it started (by kind) and its worker's own CPU; {len(workers)} workers of pid {parent}")
    print(f"{'total':>8} {LLAMA:>12} {'python/ray':>10} {'in worker':>9}  test")
    ranked = sorted(per_test.items(), key=lambda kv: -sum(kv[1].values()))
    for name, cpu in ranked:
        if sum(cpu.values()) < 3:
            break
        print(f"{sum(cpu.values()):8.1f} {cpu[LLAMA]:12.1f} {cpu[OTHER]:10.1f} {cpu['in the worker']:9.1f}  {name}")


def main(argv: list[str]) -> None:
    if len(argv) >= 2 and argv[0] == "records":
        writer = csv.DictWriter(sys.stdout, FIELDS)
        writer.writeheader()
        writer.writerows(records(Path(argv[1])))
    elif len(argv) >= 2 and argv[0] == "report":
        with open(argv[1], newline="") as f:
            rows = list(csv.DictReader(f))
        report(rows, Path(argv[2]) if len(argv) > 2 else None)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
