"""Reading Linux /proc: the one place that parses /proc/<pid>/stat, cmdline and the TCP listeners."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcStat", "cmdline", "core_ticks", "listeners", "processes", "stat", "uptime_ticks"]


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    start_ticks: int
    cpu_ticks: int  # user + system, in clock ticks

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @property
    def cpu_seconds(self) -> float:
        return self.cpu_ticks / os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> ProcStat | None:
    """The process's stat line, or None when it is gone (fields after the command's closing paren)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(
        pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), int(fields[11]) + int(fields[12])
    )


def processes() -> Iterator[ProcStat]:
    """Every process visible now."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (found := stat(int(entry.name))) is not None:
            yield found


def cmdline(pid: int) -> str:
    """argv[0] of a process, or '' when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].decode(errors="replace")[:200]
    except OSError:
        return ""


def core_ticks(text: str | None = None) -> dict[int, tuple[int, int]]:
    """Each core's (busy, total) clock ticks since boot from /proc/stat's ``cpuN`` lines (``text``:
    that file's content, read now when None); idle and iowait are not busy. Empty off Linux."""
    if text is None:
        try:
            text = Path("/proc/stat").read_text()
        except OSError:
            return {}
    ticks = {}
    for line in text.splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            counts = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            ticks[int(name[3:])] = (sum(counts) - counts[3] - counts[4], sum(counts))
    return ticks


def uptime_ticks() -> int | None:
    """Clock ticks since boot, the clock of :attr:`ProcStat.start_ticks` (None off Linux)."""
    try:
        return int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def listeners(port: int) -> set[int] | None:
    """Pids holding a listening TCP socket on ``port`` (any address), from /proc/net/tcp{,6} and
    each process's fds; None where /proc does not say (not Linux, or no permission to look)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return set()
    owners: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                owners.add(int(entry.name))
        except OSError:
            continue
    return owners or None
