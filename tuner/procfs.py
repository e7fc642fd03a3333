"""Reading Linux /proc: the one place that parses /proc/<pid>/stat and cmdline."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["ProcStat", "cmdline", "processes", "stat"]


@dataclass(frozen=True)
class ProcStat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    session: int
    start_ticks: int

    @property
    def zombie(self) -> bool:
        return self.state == "Z"


def stat(pid: int) -> ProcStat | None:
    """The process's stat line, or None when it is gone (fields after the command's closing paren)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(pid, fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


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
