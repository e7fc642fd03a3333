"""One running `tune run` (or `tune validate`) per study, whatever folder or host it starts from.

Two runs on one study ran the same configs, over-spent the budget, and the second's recovery
failed the first's live trial and stopped its server. The authority is a lease stored in the
study itself (a study user attr, so every storage has it: SQLite, PostgreSQL, ...), renewed by a
heartbeat thread. A second driver is refused while the holder is alive:

- on the same machine (same boot, same PID namespace) the holder is alive while its pid lives
  with the start time it wrote: a killed holder is taken over at once, a recycled pid is no holder;
- elsewhere (another host, another container) the holder is alive while its heartbeat is younger
  than ``stale_after``; the refusal says when the lease expires if the holder is dead.

Optuna has no compare-and-set on attrs, so a taker writes its lease, waits, and reads it back:
of two drivers that start at once the one written last keeps the study, the other is refused.
A holder whose heartbeat finds another's lease (it was taken over after a long stall) stops
(``on_lost``). An exclusive ``flock`` on ``runs/<study>/run.lock`` also keeps two runs out of
one runs/ folder (its ledger and trial folders) before the study is opened; the kernel drops it
when its holder dies (kill -9 included).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import optuna

from tuner.base.exceptions import TunerError
from tuner.host import procfs
from tuner.trials import Studied, read_lease, record_of, write_lease

__all__ = ["Lease", "StudyLock", "StudyLocked", "lease_of", "machine_id", "stale_running"]

logger = logging.getLogger(__name__)


class StudyLocked(TunerError):
    """Another run holds the study."""


def machine_id() -> str:
    """Where a pid means the same process: this boot of this kernel and this PID namespace
    (containers on one host share the boot id but not the namespace; hostnames may repeat)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return f"host:{socket.gethostname()}"
    return f"{boot}/{pidns}"


class Lease:
    """A holder's lease as stored: who (pid, host, start time, machine), since when, last beat."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @property
    def token(self) -> str:
        return str(self.data.get("token", ""))

    def age(self, now: float | None = None) -> float:
        return (now or time.time()) - float(self.data.get("beat", 0.0))

    def alive(self, stale_after: float, now: float | None = None) -> bool:
        """Whether the holder runs: by its pid where this machine can see it, else by its heartbeat."""
        if self.data.get("machine") == machine_id() and self.data.get("pid") is not None:
            found = procfs.stat(int(self.data["pid"]))
            return found is not None and not found.zombie and found.start_ticks == self.data.get("start_ticks")
        return self.age(now) < stale_after

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.data["since"])) if self.data.get("since") else "?"
        return f"pid {self.data.get('pid', '?')} on {self.data.get('host', '?')} since {since}"


def lease_of(study: optuna.Study) -> Lease | None:
    """The study's stored lease (None when no run holds it or it was cleared)."""
    data = read_lease(study)
    return Lease(dict(data)) if data else None


class StudyLock:
    """``with StudyLock(path, name) as lock: study = ...; lock.lease(study)``; raises :class:`StudyLocked`.

    The file lock is taken first, before the study is opened or changed (``--force``)."""

    def __init__(
        self,
        path: Path,
        name: str,
        *,
        heartbeat: float = 10.0,
        stale_after: float = 60.0,
        settle: float = 1.0,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = name
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.settle = settle  # between writing the lease and reading it back
        self.on_lost = on_lost
        me = procfs.stat(os.getpid())
        self.holder: dict[str, Any] = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.time(),
            "machine": machine_id(),
            "start_ticks": me.start_ticks if me else None,
            "token": uuid.uuid4().hex,
            "folder": str(self.path.parent),
        }
        self.study: optuna.Study | None = None
        self.lost = ""
        self._file: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")  # held open for the run's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _read(handle.read())
            handle.close()
            raise StudyLocked(
                f"study {self.name!r} is being run by {Lease(holder).describe() if holder else 'another process'} (lock "
                f"{self.path})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(self.holder))
        handle.flush()
        self._file = handle

    def lease(self, study: optuna.Study) -> None:
        """Hold the study in its storage: refuse a live holder, take over a dead one, then beat."""
        taken = lease_of(study)
        self._refuse_live(taken)
        self.study = study
        self._beat()
        time.sleep(self.settle)
        now = lease_of(study)
        if now is None or now.token != self.holder["token"]:  # another driver wrote after us: it keeps the study
            self.study = None
            if now is not None and now.token:
                raise StudyLocked(f"study {self.name!r} is being run by {now.describe()} (it took the study as this run started)")
            raise StudyLocked(f"study {self.name!r}: the lease could not be written to the study storage")
        if taken is not None and taken.token != self.holder["token"]:
            logger.warning("study %s: took over the lease of %s (%s)", self.name, taken.describe(), self._why_dead(taken))
        self._thread = threading.Thread(target=self._beating, name="study-lease", daemon=True)
        self._thread.start()

    def _refuse_live(self, held: Lease | None) -> None:
        if held is None or held.token == self.holder["token"] or not held.alive(self.stale_after):
            return
        if held.data.get("machine") == self.holder["machine"]:
            raise StudyLocked(
                f"study {self.name!r} is being run by {held.describe()} (its lease in the study storage; "
                f"folder {held.data.get('folder', '?')})"
            )
        expires = max(0.0, self.stale_after - held.age())
        raise StudyLocked(
            f"study {self.name!r} is being run by {held.describe()} (heartbeat in the study storage {held.age():.0f}s ago; "
            f"if that run is dead its lease expires in {expires:.0f}s)"
        )

    def _why_dead(self, lease: Lease) -> str:
        if lease.data.get("machine") == self.holder["machine"]:
            return "its process is gone"
        return f"no heartbeat for {lease.age():.0f}s"

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self.study is not None and not self.lost:
            try:
                held = lease_of(self.study)
                if held is not None and held.token == self.holder["token"]:
                    write_lease(self.study, {})
            except Exception:  # noqa: BLE001 - the lease expires by itself
                logger.warning("could not clear the study lease; it expires after %.0fs", self.stale_after)
        self.study = None
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def _beat(self) -> None:
        assert self.study is not None
        write_lease(self.study, {**self.holder, "beat": time.time()})

    def _beating(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                held = lease_of(self.study) if self.study is not None else None
                if held is not None and held.token != self.holder["token"]:
                    self.lost = f"the study was taken over by {held.describe()} (this run's heartbeat had stopped)"
                    logger.error("study %s: %s; stopping", self.name, self.lost)
                    if self.on_lost is not None:
                        self.on_lost(self.lost)
                    return
                self._beat()
            except Exception:
                logger.warning("study lease heartbeat failed", exc_info=True)


def _read(text: str) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(text)
        return found
    except ValueError:
        return {}


def stale_running(study: Studied, stale_after: float = 60.0) -> str:
    """A line when RUNNING trials have no live driver (its lease is gone or stale), else ''."""
    record = record_of(study)
    held = Lease(dict(record.lease)) if record.lease else None
    if held is not None and held.alive(stale_after):
        return ""
    running = [t.number for t in record.with_state(optuna.trial.TrialState.RUNNING)]
    who = f"{held.describe()}, last heartbeat {held.age():.0f}s ago" if held is not None else "no driver holds the study"
    return (
        f"stale: trial(s) {', '.join(map(str, running))} show RUNNING but their driver is gone ({who}); "
        f"the next `tune run --study {record.name}` records them as interrupted and re-queues them"
    )
