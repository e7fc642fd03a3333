"""A ledger of the servers a study has started: one small file per live server under
``runs/<study>/servers/``, removed after a clean teardown.

After a crash (the tuner SIGKILLed, a Ray worker lost), a rerun stops the servers whose entries
remain, also when the recorded leader already died and its children live on (vLLM's EngineCore,
SGLang's scheduler, with parent 1): a process belongs to a recorded server when it is in the
leader's process group or session and started no earlier than the leader, and the leader's pid
was not reused (a live process with that pid and another start time means the ids were
recycled: nothing is touched). Nothing is ever found by name or by port."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tuner.host import procfs
from tuner.host.processes import terminate_group, terminate_pid

__all__ = ["Entry", "Ledger", "descendants", "start_ticks"]

logger = logging.getLogger(__name__)


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22)."""
    found = procfs.stat(pid)
    return found.start_ticks if found else None


def descendants(root: int, *, stop_below: str | None = None) -> list[int]:
    """Live pids below ``root`` in the process tree; the subtree of a process whose command
    starts with ``stop_below`` is not entered (that process itself is listed)."""
    children: dict[int, list[int]] = {}
    for proc in procfs.processes():
        if not proc.zombie:
            children.setdefault(proc.ppid, []).append(proc.pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            if stop_below is None or not procfs.cmdline(child).startswith(stop_below):
                todo.append(child)
    return found


@dataclass(frozen=True)
class Entry:
    pid: int
    pgid: int
    start_ticks: int
    trial_dir: str
    argv0: str
    started_at: float

    def alive(self) -> bool:
        return start_ticks(self.pid) == self.start_ticks

    def members(self) -> list[int]:
        """Live processes of this server: its leader if alive, and every process of its group or
        session started no earlier than the leader (its forked engine children, also orphaned).
        Empty when the leader's pid now belongs to a newer process (ids recycled)."""
        leader = procfs.stat(self.pid)
        if leader is not None and leader.start_ticks != self.start_ticks:
            return []
        return sorted(
            p.pid
            for p in procfs.processes()
            if not p.zombie and self.pgid in (p.pgrp, p.session) and p.start_ticks >= self.start_ticks
        )


class Ledger:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def add(self, pid: int, trial_dir: Path | str, argv0: str) -> Entry:
        ticks = start_ticks(pid)
        entry = Entry(pid, os.getpgid(pid), ticks if ticks is not None else -1, str(trial_dir), argv0, time.time())
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{pid}.tmp"
        tmp.write_text(json.dumps(asdict(entry)))
        os.replace(tmp, self.root / f"{pid}.json")
        return entry

    def add_tree(self, root: int, label: str) -> list[int]:
        """Record every process below ``root`` not yet recorded (a local Ray cluster), but not
        what Ray's workers start (trial servers, recorded on their own)."""
        known = {e.pid for e in self.entries()}
        added = []
        for pid in descendants(root, stop_below="ray::"):
            if pid not in known:
                try:
                    self.add(pid, label, procfs.cmdline(pid))
                except OSError:
                    continue
                added.append(pid)
        return added

    def remove(self, pid: int) -> None:
        (self.root / f"{pid}.json").unlink(missing_ok=True)

    def entries(self) -> list[Entry]:
        found = []
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            try:
                found.append(Entry(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):
                logger.warning("unreadable ledger entry %s", path)
        return found

    def labelled(self, label: str) -> list[Entry]:
        return [e for e in self.entries() if e.trial_dir == label]

    def for_trial(self, trial_dir: Path) -> list[Entry]:
        wanted = Path(trial_dir).resolve()  # workers record absolute paths; the driver may hold relative ones
        return [e for e in self.entries() if Path(e.trial_dir).resolve() == wanted]

    def stop_orphans(self, entries: list[Entry] | None = None) -> list[tuple[Entry, list[int]]]:
        """Stop what still lives of the recorded servers (leader and children, see :meth:`Entry.members`);
        forget the entries. Returns each stopped entry with the pids that were alive."""
        stopped = []
        for entry in self.entries() if entries is None else entries:
            if entry.pgid == entry.pid and entry.pgid != os.getpgrp():  # a server: its own session and group
                members = entry.members()
                if members:
                    logger.warning("stopping leftover processes %s (group %d) of %s", members, entry.pgid, entry.trial_dir)
                    terminate_group(entry.pgid, term_timeout=5.0)
                    stopped.append((entry, members))
            elif entry.alive():  # e.g. Ray's helpers share a group with others: only the process itself
                logger.warning("stopping leftover process %d of %s", entry.pid, entry.trial_dir)
                terminate_pid(entry.pid, term_timeout=5.0)
                stopped.append((entry, [entry.pid]))
            self.remove(entry.pid)
        return stopped
