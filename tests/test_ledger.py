"""The ledger stops what a crashed run left: also a server's children after its leader died
(vLLM's EngineCore, SGLang's scheduler keep the GPU with parent 1), never a recycled pid."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tuner.host import procfs
from tuner.host.ledger import Entry, Ledger, start_ticks

FAULT = Path(__file__).resolve().parent / "fault" / "hang_server.py"


def _child_of(log: Path, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := re.search(r"child (\d+)", log.read_text()):
            return int(found.group(1))
        time.sleep(0.05)
    raise AssertionError("the fault server never started its child")


def _alive(pid: int) -> bool:
    found = procfs.stat(pid)
    return found is not None and not found.zombie


def test_children_of_a_dead_leader_are_stopped(tmp_path: Path) -> None:
    """The leader (the 'API server') dies by SIGKILL; its forked child lives on in the group."""
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        leader = subprocess.Popen(
            [sys.executable, str(FAULT), "--port", "0"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    ledger = Ledger(tmp_path / "servers")
    ledger.add(leader.pid, tmp_path / "trials" / "0", sys.executable)
    child = _child_of(log)
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait(5)
    assert _alive(child) and not _alive(leader.pid)

    stopped = ledger.stop_orphans()

    assert [pids for _, pids in stopped] == [[child]]
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the orphaned child survived"
    assert ledger.entries() == []


def test_a_recycled_pid_is_never_touched(tmp_path: Path) -> None:
    """An entry whose pid now belongs to a process with another start time names nothing."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        ticks = start_ticks(other.pid)
        stale = Entry(other.pid, other.pid, ticks - 1, str(tmp_path), "old-server", 0.0)
        assert stale.members() == []
        Ledger(tmp_path / "servers").stop_orphans([stale])
        assert other.poll() is None, "a process that merely reuses a recorded pid was stopped"
        mine = Entry(other.pid, other.pid, ticks, str(tmp_path), sys.executable, 0.0)
        assert mine.members() == [other.pid]
    finally:
        other.kill()
        other.wait()


def test_a_trials_entries_are_found_from_a_relative_path(tmp_path: Path, monkeypatch) -> None:
    """Workers record absolute trial dirs; the driver sweeps with runs/<study>/trials/<n>."""
    monkeypatch.chdir(tmp_path)
    ledger = Ledger(Path("runs/s/servers"))
    entry = ledger.add(os.getpid(), (tmp_path / "runs/s/trials/3").resolve(), sys.executable)
    assert ledger.for_trial(Path("runs/s/trials/3")) == [entry]
    assert ledger.for_trial(Path("runs/s/trials/4")) == []
