"""One running `tune run` (or `tune validate`) per study.

Two runs on one study ran the same configs, over-spent the budget, and the second's recovery
stopped the first's servers and Ray processes through the shared ledger. A run holds:

- an exclusive ``flock`` on ``runs/<study>/run.lock``: the kernel drops it when the holder dies
  (kill -9 included), so a crashed run never blocks its rerun; the file names the holder;
- for a storage other machines can reach (an RDB URL that is not SQLite), also a lease in the
  study's system attrs, renewed by a heartbeat thread: a holder whose heartbeat is older than
  ``stale_after`` is taken to be dead.

A second run is refused with one line naming the holder (pid, host, since when).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import optuna

from tuner.exceptions import TunerError

__all__ = ["LEASE_ATTR", "StudyLock", "StudyLocked", "storage_url"]

logger = logging.getLogger(__name__)

LEASE_ATTR = "tuner.run_lease"


class StudyLocked(TunerError):
    """Another run holds the study."""


class StudyLock:
    """``with StudyLock(path, name) as lock: study = ...; lock.lease(study)``; raises :class:`StudyLocked`.

    The file lock is taken first, before the study is opened or changed (``--force``)."""

    def __init__(self, path: Path, name: str, *, heartbeat: float = 10.0, stale_after: float = 60.0) -> None:
        self.path = Path(path)
        self.name = name
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        self.study: optuna.Study | None = None
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
        handle = open(self.path, "a+")  # noqa: SIM115 - held open for the run's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _read(handle.read())
            handle.close()
            raise StudyLocked(f"study {self.name!r} is being run by {_describe(holder)} (lock {self.path})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(self.holder))
        handle.flush()
        self._file = handle

    def lease(self, study: optuna.Study) -> None:
        """Where the storage is shared by machines (an RDB that is not SQLite), hold the study
        there too: refuse a live lease of another host, then renew ours by heartbeat."""
        url = storage_url(study)
        if not url or url.startswith("sqlite"):
            return
        lease = study._storage.get_study_system_attrs(study._study_id).get(LEASE_ATTR)
        if lease and lease.get("host") != self.holder["host"] and time.time() - lease.get("beat", 0) < self.stale_after:
            raise StudyLocked(f"study {self.name!r} is being run by {_describe(lease)} (heartbeat in the study storage)")
        self.study = study
        self._beat()
        self._thread = threading.Thread(target=self._beating, name="study-lease", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            try:
                self._set(None)
            except Exception:  # noqa: BLE001 - the lease expires by itself
                logger.warning("could not clear the study lease; it expires after %.0fs", self.stale_after)
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def _set(self, value: dict[str, Any] | None) -> None:
        assert self.study is not None
        self.study._storage.set_study_system_attr(self.study._study_id, LEASE_ATTR, value)

    def _beat(self) -> None:
        self._set({**self.holder, "beat": time.time()})

    def _beating(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - a storage hiccup; the next beat retries
                logger.warning("study lease heartbeat failed", exc_info=True)


def storage_url(study: optuna.Study) -> str:
    """The study's RDB URL ('' for an in-memory or journal storage)."""
    backend = getattr(study._storage, "_backend", study._storage)
    return str(getattr(backend, "url", ""))


def _read(text: str) -> dict[str, Any]:
    try:
        return json.loads(text)
    except ValueError:
        return {}


def _describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["since"])) if holder.get("since") else "?"
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since {since}"
