"""A pytest plugin: when each test ran on which xdist worker, the CPU it cost, and how busy the
machine was meanwhile. For finding where README's test command spends its minutes.

    SUITE_TIMELINE=/tmp/t.jsonl PYTHONPATH=. .venv/bin/python -m pytest -n auto -p scripts.suite_timeline
    python scripts/suite_timeline.py /tmp/t.jsonl          # per-test table and the idle core-seconds

Each worker writes one line per test: start and end (wall clock), its own CPU-seconds and those of
the children it reaped meanwhile (subprocesses such as `tune`, servers it started and waited for;
what a child of theirs did counts once they reaped it). The controller writes the machine's busy
cores once a second from /proc/stat. Attribution of reaped children is only as good as the reaping:
a server torn down in a session fixture counts in the test that ends the session.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

PATH = os.environ.get("SUITE_TIMELINE")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_started: dict[str, tuple[float, os.times_result]] = {}


def _write(record: dict[str, Any]) -> None:
    assert PATH is not None
    with open(PATH, "a") as out:  # one short line per write: appends of several processes stay whole
        out.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    if PATH and WORKER:
        _started[nodeid] = (time.time(), os.times())


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if not (PATH and WORKER) or nodeid not in _started:
        return
    start, before = _started.pop(nodeid)
    after = os.times()
    _write(
        {
            "worker": WORKER,
            "test": nodeid,
            "start": start,
            "end": time.time(),
            "cpu_self": after.user + after.system - before.user - before.system,
            "cpu_children": after.children_user + after.children_system - before.children_user - before.children_system,
        }
    )


def _busy_cores() -> None:
    def read() -> list[tuple[int, int]]:  # the machine's (total, idle + iowait) ticks, then each core's
        with open("/proc/stat") as stat:
            rows = [line.split() for line in stat if line.startswith("cpu")]
        return [(sum(map(int, row[1:])), int(row[4]) + int(row[5])) for row in rows]

    ticks = os.sysconf("SC_CLK_TCK")
    last = read()
    while True:
        time.sleep(1.0)
        now = read()
        busy = [((t - t0) - (i - i0)) / ticks for (t, i), (t0, i0) in zip(now, last, strict=False)]
        last = now
        _write({"machine": time.time(), "busy_cores": round(busy[0], 3), "per_core": [round(b, 3) for b in busy[1:]]})


def pytest_configure(config: object) -> None:
    if PATH and not WORKER:
        threading.Thread(target=_busy_cores, daemon=True).start()


def report(path: str) -> None:
    tests, machine = [], []
    for line in open(path):
        record = json.loads(line)
        (machine if "machine" in record else tests).append(record)
    t0 = min(r["start"] for r in tests)
    t1 = max(r["end"] for r in tests)
    print(f"# {len(tests)} tests, {t1 - t0:.0f} s from the first start to the last end")
    busy = [m["busy_cores"] for m in machine if t0 <= m["machine"] <= t1]
    cores = os.cpu_count() or 1
    print(f"# machine: {sum(busy):.0f} busy core-seconds of {cores * len(busy)} ({len(busy)} samples)")
    by_worker: dict[str, float] = {}
    for r in tests:
        by_worker[r["worker"]] = by_worker.get(r["worker"], 0.0) + r["end"] - r["start"]
    for worker, seconds in sorted(by_worker.items()):
        print(f"# {worker}: {seconds:.0f} s in tests, {t1 - t0 - seconds:.0f} s between or after them")
    per_core = [m["per_core"] for m in machine if t0 <= m["machine"] <= t1 and "per_core" in m]
    if per_core:  # each core's busy seconds per 20 s of the run: where a core sat idle
        print("# each core's busy seconds per 20 s: " + "  ".join(f"cpu{i}" for i in range(len(per_core[0]))))
        for first in range(0, len(per_core), 20):
            chunk = per_core[first : first + 20]
            print(f"#   {first:4d}-{first + len(chunk):4d} s: " + "  ".join(f"{sum(c):4.1f}" for c in zip(*chunk, strict=True)))
    print("#  wall   cpu(self+children)  start  worker  test")
    for r in sorted(tests, key=lambda r: r["end"] - r["start"], reverse=True)[:60]:
        cpu = r["cpu_self"] + r["cpu_children"]
        print(f"{r['end'] - r['start']:6.1f} {cpu:8.1f} {r['start'] - t0:12.0f}  {r['worker']:>5}  {r['test']}")


if __name__ == "__main__":
    report(sys.argv[1])
