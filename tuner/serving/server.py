"""A server's lifetime: start in its own process group, wait until it really serves, end it all.

``ServerProcess`` is a context manager. Output goes line by line (secrets redacted) to the
trial's ``server.log``; a reader thread watches each line for the adapter's fatal signatures so
that waiting stops the moment one appears. Teardown signals the whole process group (TERM,
TERM, then KILL) and verifies that no process of the group or session is left and that the
port is free. Nothing is ever killed by name or by port.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import httpx

from tuner.base.evidence import Evidence, LogLine
from tuner.base.exceptions import StartupFailed, StartupTimeout, TeardownError
from tuner.engines import Category, Command, EngineAdapter, Signature, first_fatal, raised_exception
from tuner.host import procfs
from tuner.host.ledger import Ledger
from tuner.host.processes import terminate_group

__all__ = ["ServerProcess", "end_servers_on_sigterm"]

logger = logging.getLogger(__name__)


class ServerProcess:
    """One engine server. Use as ``with ServerProcess(...) as server: server.wait_ready()``."""

    def __init__(
        self,
        command: Command,
        *,
        adapter: EngineAdapter,
        log_path: Path,
        host: str,
        port: int,
        model: str,
        startup_timeout: float,
        memory_cap: int | None = None,
        fatal_grace: float = 2.0,
        term_timeout: float = 5.0,
        poll_interval: float = 0.2,
        ledger: Ledger | None = None,
        api_key: str | None = None,
    ) -> None:
        self.command = command
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.adapter = adapter
        self.log_path = Path(log_path)
        self.host = host
        self.port = port
        self.model = model
        self.startup_timeout = startup_timeout
        self.memory_cap = memory_cap
        self.fatal_grace = fatal_grace
        self.term_timeout = term_timeout
        self.poll_interval = poll_interval
        self.ledger = ledger
        self.proc: subprocess.Popen[str] | None = None
        self.stopped_by_tuner = False
        self.teardown_s = 0.0
        self.started_at = 0.0
        self.ready_at: float | None = None
        self._fatal: tuple[Signature, str] | None = None
        self.fatal_at: float | None = None  # wall-clock time the first fatal line was read
        self._fatal_seen = threading.Event()
        self._reader: threading.Thread | None = None
        self.output_closed_at: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "server not started"
        return self.proc.pid

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:  # a signal's exception after the spawn, before the with block: __exit__ will not run
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "w", encoding="utf-8")  # closed by the reader thread
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            list(self.command.argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            env={**os.environ, **self.command.env},
            start_new_session=True,
            preexec_fn=_memory_cap(self.memory_cap),
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout, log), daemon=True)
        self._reader.start()
        if self.ledger is not None:
            self.ledger.add(self.proc.pid, self.log_path.parent, self.command.argv[0])
        logger.info("started pid %d on port %d: %s", self.proc.pid, self.port, self.command.shell_line())

    def _read(self, stream: IO[str], log: IO[str]) -> None:
        with log:
            for line in stream:
                log.write(self.command.redact(line))
                log.flush()
                if self._fatal is None and (sig := first_fatal(self.adapter.signatures, line)):
                    self.fatal_at = time.time()
                    self._fatal = (sig, line.rstrip())
                    self._fatal_seen.set()
        self.output_closed_at = time.time()  # every process of the server closed its output: exited

    def died(self) -> bool:
        """The server exited on its own (not stopped by the tuner)."""
        return self.proc is not None and self.proc.poll() is not None and not self.stopped_by_tuner

    def failure_evidence(self, *, signature: str, details: dict[str, Any], since: float) -> Evidence:
        """Evidence of a server that failed while it served: how it ended, the engine's own
        words (the matched signature, else its last raised exception), when it exited (seconds
        after the wall-clock time ``since``), and ``details``."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self._let_it_exit()  # it may be on its way out: give it a moment to write its last lines
        else:
            self._drain()
        found = self.evidence(default_signature=signature)
        extra: dict[str, Any] = {"stopped_by_tuner": self.stopped_by_tuner}
        raised = raised_exception(list(enumerate(self.log_text().splitlines(), start=1)))
        if raised is not None:
            extra["last_exception"] = raised.text.strip()[-500:]
        if self.proc.poll() is not None and self.output_closed_at is not None:
            extra["exited_after_s"] = round(self.output_closed_at - since, 3)
        if found.category in (
            None,
            Category.CRASH,
        ):  # a generic crash: name what happened, keep the engine's words as the headline
            found = replace(found, signature=signature)
        if raised is None and not found.details.get("fatal_line"):  # no words of the engine: say what the tuner saw
            when = f" {extra['exited_after_s']:.1f}s into the probe" if "exited_after_s" in extra else ""
            how = found.signal or (f"exit {found.returncode}" if found.returncode is not None else "still running")
            first = details.get("first_error")
            extra["headline"] = f"the server ended ({how}){when}" + (f"; first failed request: {first}" if first else "")
        return replace(found, details={**found.details, **extra, **details})

    def wait_ready(self) -> float:
        """Block until the server serves a real completion; returns seconds taken.

        Raises :class:`StartupFailed` as soon as the process exits or prints a fatal line,
        :class:`StartupTimeout` when the startup timeout passes first."""
        assert self.proc is not None, "server not started"
        deadline = self.started_at + self.startup_timeout
        with httpx.Client(timeout=httpx.Timeout(10.0, connect=1.0), trust_env=False, headers=self.headers) as client:
            while True:
                if self._fatal_seen.is_set() and self._fatal is not None:
                    self._let_it_exit()
                    raise StartupFailed(f"fatal log line: {self._fatal[1]}", evidence=self.evidence())
                if self.proc.poll() is not None:
                    self._drain()  # beside a busy suite, a port_in_use exit was once reported with no lines
                    raise StartupFailed(f"server exited with {self.proc.returncode}", evidence=self.evidence())
                left = deadline - time.monotonic()
                client.timeout = httpx.Timeout(min(10.0, max(0.5, left)), connect=min(1.0, max(0.1, left)))
                if self.adapter.ready(client, self.url, model=self.model) and self._listener_is_ours():
                    self.ready_at = time.monotonic()
                    return self.ready_at - self.started_at
                if time.monotonic() >= deadline:
                    raise StartupTimeout(
                        f"not ready after {self.startup_timeout:.0f}s",
                        evidence=self.evidence(default_signature="startup_timeout"),
                    )
                self._fatal_seen.wait(self.poll_interval)

    def _listener_is_ours(self) -> bool:
        """The port answers for this server, not another that holds it (the same model can be
        served twice: a second start that failed to bind would see the first one ready)."""
        assert self.proc is not None
        owners = procfs.listeners(self.port)
        if owners is None:
            return self.proc.poll() is None  # /proc does not say: at least our process must live
        ours = {self.proc.pid} | {p.pid for p in procfs.processes() if p.pgrp == self.proc.pid}
        return bool(owners & ours)

    def _let_it_exit(self) -> None:
        """After a fatal line, give the engine a moment to write its last lines and exit."""
        assert self.proc is not None
        try:
            self.proc.wait(self.fatal_grace)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is not None:
            self._drain(1.0)

    def _drain(self, timeout: float = 2.0) -> None:
        """Wait at most ``timeout`` for the log reader to write an ended server's last lines (the
        pipe may still hold them when the exit is seen)."""
        if self._reader is not None:
            self._reader.join(timeout)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def evidence(self, *, default_signature: str | None = None) -> Evidence:
        """What happened so far: argv, exit status, elapsed, matched signature and lines."""
        assert self.proc is not None
        code = self.proc.poll()
        text = self.log_text()
        match = self.adapter.classify(text)
        details = dict(match.details) if match else {}
        if self._fatal is not None:
            details["fatal_line"] = self._fatal[1]
            details["fatal_seen_at"] = self.fatal_at
        return Evidence(
            argv=tuple(self.command.redact(a) for a in self.command.argv),
            elapsed_s=round(time.monotonic() - self.started_at, 3),
            signature=match.signature.name if match else default_signature,
            category=match.signature.category if match else None,
            **_exit_fields(code),
            lines=match.lines if match else _tail(text),
            log_path=str(self.log_path),
            details=details,
        )

    def settled(self, evidence: Evidence) -> Evidence:
        """``evidence`` taken before teardown, completed with how the process ended after it."""
        assert self.proc is not None
        code = self.proc.poll()
        return replace(
            evidence,
            **_exit_fields(code),
            details={**evidence.details, "stopped_by_tuner": self.stopped_by_tuner},
        )

    def stop(self) -> float:
        """TERM the group, TERM again, KILL; verify nothing of it is left. Returns seconds taken."""
        if self.proc is None:
            return 0.0
        begun = time.monotonic()
        begun_ticks = procfs.uptime_ticks()
        pgid = self.proc.pid
        if self.proc.poll() is None:
            self.stopped_by_tuner = True
        survivors = terminate_group(pgid, term_timeout=self.term_timeout, proc=self.proc)
        _reap(self.proc)
        self._drain()
        if survivors:
            raise TeardownError(f"processes {survivors} of group {pgid} survived KILL", evidence=self.evidence())
        if self.ledger is not None:
            self.ledger.remove(pgid)
        # The port is ours to check only if our server held it (a failed start may have met another's).
        if self.ready_at is not None and not _port_free(self.host, self.port):
            if (left := leftover_listeners(self.port, pgid, begun_ticks)) or left is None:
                raise TeardownError(f"port {self.port} still bound after teardown", evidence=self.evidence())
            logger.info("port %d: freed by this server, then bound by another process started after its teardown", self.port)
        self.teardown_s = time.monotonic() - begun
        return self.teardown_s


def end_servers_on_sigterm() -> None:
    """For scripts that start servers outside `tune run` (the benchmarks): SIGTERM (``timeout``, a
    job scheduler) raises SystemExit in the main thread, so every ``with ServerProcess`` /
    ``serve()`` tears its server down instead of leaving it running in its own session."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _exit_fields(code: int | None) -> dict[str, Any]:
    """Popen's returncode as Evidence fields: an exit status, or the name of the killing signal."""
    if code is not None and code < 0:
        return {"returncode": None, "signal": signal.Signals(-code).name}
    return {"returncode": code, "signal": None}


def _reap(proc: subprocess.Popen[str]) -> None:
    try:
        proc.wait(1.0)
    except subprocess.TimeoutExpired:
        pass


def leftover_listeners(port: int, pgid: int, since_ticks: int | None) -> set[int] | None:
    """The listeners on ``port`` that may be left of the server of group ``pgid``: in its group
    or session, or started before its teardown began (``since_ticks``, :func:`procfs.uptime_ticks`).
    A process started later outside them bound the port after this server freed it (another
    server on this host, picked the freed port): not a leftover. None where /proc does not say."""
    owners = procfs.listeners(port)
    if owners is None or since_ticks is None:
        return None
    left = set()
    for pid in owners:
        st = procfs.stat(pid)
        if st is None:
            continue  # gone meanwhile
        if pgid in (st.pgrp, st.session) or st.start_ticks <= since_ticks:
            left.add(pid)
    return left


def _port_free(host: str, port: int, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False
        time.sleep(0.1)


def _memory_cap(limit: int | None) -> Callable[[], None] | None:
    """A preexec function capping the server's address space (like a GPU partition's memory)."""
    if limit is None:
        return None

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _tail(text: str, count: int = 8) -> tuple[LogLine, ...]:
    lines = text.splitlines()
    start = max(0, len(lines) - count)
    return tuple(LogLine(start + i + 1, line) for i, line in enumerate(lines[start:]))
