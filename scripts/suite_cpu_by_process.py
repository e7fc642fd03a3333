"""CPU-seconds by kind of process (llama-server, Ray parts, `tune` subprocesses, ...) while a run lasts.

    python scripts/suite_cpu_by_process.py /tmp/stop-file > cpu.txt &   # then run the suite
    ... ; touch /tmp/stop-file                                          # it prints on seeing the file

Reads /proc/PID/stat every 0.25 s and adds each process's new user + system time to its kind (named
from its command line, else its comm). Processes already alive at the start count only what they use
after it. A process that lives less than 0.25 s between two reads is missed, so short-lived ones
(Python helpers that import and exit) are undercounted; long-lived servers are counted well.
docs/data/suite/ci13-cpu.txt was taken with a first version that counted the whole past of processes
found alive (its 'other:' rows); its llama-server, tune and Ray rows hold either way.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")


def kind(command: str, comm: str) -> str:
    if "llama-server" in command or comm == "llama-server":
        return "llama-server"
    if "gcs_server" in command:
        return "ray:gcs"
    if command.split(" ")[0].endswith("raylet"):
        return "ray:raylet"
    if "default_worker.py" in command:
        return "ray:python-worker"
    if any(part in command for part in ("dashboard", "monitor.py", "runtime_env/agent", "log_monitor")):
        return "ray:helpers"
    if "-m tuner" in command or "bin/tune" in command:
        return "tune-subprocess"
    if "xdist" in command or "pytest" in command or "execnet" in command:
        return "pytest"
    if "pip" in command:
        return "pip"
    if "postgres" in comm or "postgres" in command:
        return "postgres"
    return "other:" + (os.path.basename(command.split(" ")[0]) or comm)[:20]


def read() -> dict[tuple[str, str], tuple[int, str]]:
    """{(pid, start time): (user + system ticks, kind)} of every process now."""
    now = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            command = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ").strip()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError):
            continue
        now[(pid, fields[19])] = (int(fields[11]) + int(fields[12]), kind(command, comm))
    return now


def main(stop: Path) -> None:
    seen = {key: ticks for key, (ticks, _) in read().items()}  # alive at the start: only what comes after
    total: collections.Counter[str] = collections.Counter()
    while not stop.exists():
        for key, (ticks, name) in read().items():
            total[name] += (ticks - seen.get(key, 0)) / HZ
            seen[key] = ticks
        time.sleep(0.25)
    whole = sum(total.values()) or 1.0
    for name, seconds in total.most_common(25):
        if seconds < 0.05:
            break
        print(f"{seconds:8.1f} cpu-s {100 * seconds / whole:5.1f}%  {name}")
    print(f"{whole:8.1f} total")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
