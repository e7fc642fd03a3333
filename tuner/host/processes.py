"""Ending processes by their group and session, also when the leader already died (engines fork
children that outlive it): the one place that signals them. Below the server and the ledger."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tuner.host import procfs

__all__ = ["group_members", "terminate_group", "terminate_pid"]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group or session is ``pgid``."""
    return [p.pid for p in procfs.processes() if not p.zombie and pgid in (p.pgrp, p.session)]


def terminate_group(pgid: int, *, term_timeout: float, proc: subprocess.Popen[str] | None = None) -> list[int]:
    """TERM the group, TERM again (llama.cpp exits on the second while a client streams), then
    KILL. Returns the pids still alive afterwards (empty when the group is gone). Interrupted
    while it waits (Ctrl-C, a SIGTERM handler's SystemExit: a `timeout` that fires while a
    slow engine shuts down), it KILLs the group at once and lets the interruption go on: the
    group must not outlive the process that was ending it."""
    try:
        for sig, wait in ((signal.SIGTERM, term_timeout), (signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
            if not group_members(pgid):
                break
            _signal_group(pgid, sig)
            _wait_group_gone(pgid, proc, wait)
    except BaseException:
        _signal_group(pgid, signal.SIGKILL)
        raise
    return group_members(pgid)


def terminate_pid(pid: int, *, term_timeout: float) -> bool:
    """TERM one process, then KILL it; True when it is gone."""
    first = procfs.stat(pid)
    if first is None:
        return True

    def gone() -> bool:
        now = procfs.stat(pid)
        return now is None or now.start_ticks != first.start_ticks or now.zombie

    for sig, wait in ((signal.SIGTERM, term_timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if gone():
                return True
            time.sleep(0.05)
    return gone()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    for pid in group_members(pgid):  # members that moved to a new group but stayed in the session
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_group_gone(pgid: int, proc: subprocess.Popen[str] | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            proc.poll()
        if not group_members(pgid):
            return
        time.sleep(0.05)
