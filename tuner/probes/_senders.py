"""Open-loop arrivals sent by processes that do nothing else, so the loop sends what it reports.

A level's arrival times are fixed before it starts: :func:`arrival_offsets` draws a Poisson
process of the rate from the seed, as absolute times from the level's start ``t0``. Each of K
sender processes takes every K-th arrival (together they are the one Poisson process), runs its
own event loop and HTTP client, and releases each request at its scheduled time; the parent's
stream parsing and window arithmetic cannot delay a send. A request's ``started`` is its
scheduled arrival (TTFT counts from it: a late send is latency, never omission) and ``sent`` the
moment its sender released it. What each request saw streams back to the parent in small deltas
(the arrival, new token stamps, the end) and is mirrored into :class:`RequestRecord`\\ s, which the
load probe's window and summary read exactly as the closed loop's.

``time.perf_counter`` is ``CLOCK_MONOTONIC`` on Linux: one clock for every process of the machine.

How many senders a rate needs comes from the measured ceiling of one client core
(``benchmarks/client_ceiling.py --open-loop``, docs/measurements.md): :func:`senders_for`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from tuner.base.exceptions import ProbeError
from tuner.host.processes import terminate_group
from tuner.probes._prompts import Source
from tuner.probes._stream import RequestRecord, stop_clients, stream_request
from tuner.workload import MAX_TURNS, poisson

__all__ = [
    "CEILING",
    "Plan",
    "Senders",
    "arrival_offsets",
    "client_cores",
    "senders_for",
    "with_prompt",
]

logger = logging.getLogger(__name__)

FLUSH_S = 0.1  # a sender ships what its requests saw this often
START_MARGIN_S = 0.25  # t0 lies this far ahead of the level's start command: every sender is listening by then
READY_TIMEOUT_S = 30.0  # a sender process starts (imports, its event loop) within this
STOP_GRACE_S = 10.0  # a sender that has not answered a stop by then (plus the request timeout) is given up


@dataclass(frozen=True)
class Ceiling:
    """What one client core sends with achieved/offered >= 0.99 against a server that is never
    the bottleneck, as a cost per request: ``per_request_s`` + ``per_token_s`` x streamed tokens
    (core-seconds). Measured by ``benchmarks/client_ceiling.py --open-loop`` (docs/measurements.md);
    ``headroom``: the share of that ceiling a sender is planned at."""

    per_request_s: float
    per_token_s: float
    headroom: float = 0.5

    def rate(self, output_tokens: int) -> float:
        """Requests/s one core sends at its ceiling, streams of ``output_tokens``."""
        return 1.0 / (self.per_request_s + self.per_token_s * output_tokens)


# Measured on this workplace's 2-core machine with tokens spaced as an engine streams them
# (benchmarks/client_ceiling.py --open-loop --gap 0.01, 2026-12-06, docs/measurements.md): one core
# (a sender and the probe's parent) sent 85 requests/s of 64-token streams and 23.1/s of 256-token
# ones within the bound (achieved/offered >= 0.99, send lag p99 <= 50 ms, ITL p99 within 5 ms of
# the gap); two more runs: 85 and 80/s, 25 and 27.5/s. Planned at the lower envelope of the three,
# 2.0 ms a request + 165 us a token (tests/probes/test_open_loop.py holds it under every measured
# ceiling): one read, one SSE parse, one stamp per token. The
# earlier 80 us a token (inferred from one vLLM level) planned one sender for 38.88 requests/s of
# 128-token SGLang streams on the H200, which then ran 38-70 ms late at p99 by minute and stamped ITLs late.
CEILING = Ceiling(per_request_s=2.0e-3, per_token_s=1.65e-4)


def client_cores() -> int:
    """The cores this process may run on: a GPU partition's client cores while a trial probes."""
    return len(os.sched_getaffinity(0))


def senders_for(rate: float, output_tokens: int, cores: int) -> tuple[int, bool]:
    """(sender processes for ``rate`` requests/s of ``output_tokens``-token streams, whether the
    ``cores`` suffice): each sender planned at ``CEILING.headroom`` of one core's ceiling, at most
    one per core."""
    cores = max(1, cores)
    needed = max(1, math.ceil(rate / (CEILING.headroom * CEILING.rate(output_tokens))))
    return min(needed, cores), rate <= cores * CEILING.rate(output_tokens)


def arrival_offsets(rate: float, seed: int) -> Iterator[float]:
    """Poisson arrivals of ``rate`` per second: seconds from the level's start, fixed by ``seed``."""
    return poisson(rate, seed)


def with_prompt(body: dict[str, Any], api: str, text: str) -> dict[str, Any]:
    """The request body with its prompt: ``prompt`` (completions) or one user message (chat)."""
    if api == "chat":
        return {**body, "messages": [{"role": "user", "content": text}]}
    return {**body, "prompt": text}


@dataclass(frozen=True)
class Plan:
    """One level as a sender needs it (pickled to each): the arrivals ``index``, ``index`` +
    ``senders``, ... of the Poisson process (``rate``, ``seed``) from ``t0`` (perf_counter time),
    at most ``cap`` of them at the server at once (later ones wait on the sender, the wait in
    their TTFT); arrival ``i`` starts session ``first_request + i`` of ``source`` (its arrival
    times: ``source.arrivals``, a Poisson process or a trace's own times), whose later turns
    follow each one's end and think time; a request longer than ``context`` is never sent."""

    rate: float
    seed: int
    t0: float
    url: str
    body: dict[str, Any]
    api: str
    headers: dict[str, str] = field(repr=False)
    source: Source
    first_request: int
    cap: int
    request_timeout: float
    cached_field: tuple[str, str] | None = None
    senders: int = 1
    index: int = 0
    context: int | None = None


# A delta: (key: arrival index x MAX_TURNS + turn, started, sent, ttft, e2e, new stamps, prompt_tokens,
# completion_tokens, cached_tokens, error, ok, cancelled, queued, at_gate, session, asked prompt, asked output)
Delta = tuple[
    int, float, float | None, float | None, float | None, list[float], Any, Any, Any, Any, bool, bool, float | None,
    float | None, Any, Any, Any,
]  # fmt: skip


@dataclass
class _Sender:
    popen: subprocess.Popen[bytes]
    commands: Connection
    results: Connection
    stopped: asyncio.Event | None = None


class Senders:
    """Sender processes, each in its own session, started as a level needs them and kept for the
    probe's next levels; :meth:`close` (or the ``with`` block's end) ends every one of them."""

    def __init__(self) -> None:
        self._procs: list[_Sender] = []

    def __enter__(self) -> Senders:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self._procs]

    def _ensure(self, count: int) -> None:
        """``count`` senders, each listening: a new one says so once its imports and loop are up
        (~0.5 s), so a level's ``t0`` never falls before a sender can send."""
        new = [_start() for _ in range(count - len(self._procs))]
        self._procs.extend(new)
        for proc in new:
            if not proc.results.poll(READY_TIMEOUT_S):
                raise ProbeError(f"open loop: sender process {proc.popen.pid} was not ready after {READY_TIMEOUT_S:.0f}s")
            kind, _ = proc.results.recv()
            assert kind == "ready", kind

    async def start(self, plan: Plan, senders: int, records: list[RequestRecord], on_end: Callable[[], None]) -> Level:
        """Send ``plan``'s arrivals from ``senders`` processes; what they see lands in ``records``
        (``on_end`` is called for each request that ends). Returns the running level."""
        self._ensure(senders)
        used = self._procs[:senders]
        level = Level(used, records, on_end)
        t0 = time.perf_counter() + START_MARGIN_S
        for k, proc in enumerate(used):
            proc.stopped = asyncio.Event()
            asyncio.get_running_loop().add_reader(proc.results.fileno(), level.readable, proc)
            proc.commands.send(("level", replace(plan, t0=t0, senders=senders, index=k)))
        level.t0 = t0
        return level

    def close(self) -> None:
        for proc in self._procs:
            try:
                proc.commands.send(("exit",))
            except OSError:
                pass
        for proc in self._procs:
            try:
                proc.popen.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
            left = terminate_group(proc.popen.pid, term_timeout=2.0)  # also what a sender may have forked
            if left:
                logger.warning("sender process group %d still has %s after TERM and KILL", proc.popen.pid, left)
            proc.popen.wait()
            proc.commands.close()
            proc.results.close()
        self._procs = []


class Level:
    """A level being sent: mirrors the senders' deltas into records; :meth:`stop` ends it."""

    def __init__(self, procs: list[_Sender], records: list[RequestRecord], on_end: Callable[[], None]) -> None:
        self._procs = procs
        self._records = records
        self._mirror: dict[int, RequestRecord] = {}
        self._on_end = on_end
        self.t0 = 0.0
        self.failed: list[str] = []

    @property
    def arrivals(self) -> int:
        """Sessions the senders started so far (their arrival indices run 0..n-1 up to the stop)."""
        return max((key // MAX_TURNS for key in self._mirror), default=-1) + 1

    def readable(self, proc: _Sender) -> None:
        try:
            while proc.results.poll():
                kind, payload = proc.results.recv()
                if kind == "d":
                    self._merge(payload)
                elif kind == "stopped":
                    assert proc.stopped is not None
                    proc.stopped.set()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(proc.results.fileno())
            code = proc.popen.poll()
            self.failed.append(f"sender {proc.popen.pid} ended (exit {code})")
            logger.warning("open loop: sender process %d ended mid-level (exit %s)", proc.popen.pid, code)
            if proc.stopped is not None:
                proc.stopped.set()

    def _merge(self, deltas: list[Delta]) -> None:
        for d in deltas:
            i, started, sent, ttft, e2e, stamps, prompt, completion, cached, error, ok, cancelled, queued, at_gate = d[:14]
            rec = self._mirror.get(i)
            if rec is None:
                rec = self._mirror[i] = RequestRecord(ok=False, started=started, session=d[14], turn=i % MAX_TURNS)
                rec.asked_prompt, rec.asked_output = d[15], d[16]
                self._records.append(rec)
            rec.sent, rec.queued, rec.at_gate = sent, queued, at_gate  # written after its first delta, where it waited at the cap
            rec.stamps.extend(stamps)
            rec.ttft, rec.e2e, rec.error, rec.ok, rec.cancelled = ttft, e2e, error, ok, cancelled
            rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens = prompt, completion, cached
            if e2e is not None:
                self._on_end()

    async def stop(self, request_timeout: float) -> None:
        """Stop sending, cancel what is in flight, and wait for every sender's last deltas."""
        loop = asyncio.get_running_loop()
        for proc in self._procs:
            try:
                proc.commands.send(("stop",))
            except OSError:
                pass
        waits = [proc.stopped.wait() for proc in self._procs if proc.stopped is not None]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), timeout=request_timeout + STOP_GRACE_S)
        except TimeoutError:
            logger.warning("open loop: a sender did not confirm its stop within %.0fs", request_timeout + STOP_GRACE_S)
        for proc in self._procs:
            loop.remove_reader(proc.results.fileno())


def _start() -> _Sender:
    """One sender: :func:`main` with the two pipes' ends, in a session of its own."""
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the tuner package, whatever sys.path says
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        popen = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from tuner.probes._senders import main; main(sys.argv[1:])",
                str(cmd_r),
                str(res_w),
            ],
            pass_fds=(cmd_r, res_w),
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    finally:
        os.close(cmd_r)
        os.close(res_w)
    return _Sender(popen, Connection(cmd_w, readable=False), Connection(res_r, writable=False))


# ---- the sender process -------------------------------------------------------------------------


def main(argv: list[str]) -> None:
    commands = Connection(int(argv[0]), writable=False)
    out = Connection(int(argv[1]), readable=False)
    gc.collect()
    gc.freeze()  # what the imports made is never scanned again: a full collection stays short while a long level runs
    asyncio.run(_serve(commands, out))


async def _serve(commands: Connection, out: Connection) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()

    def readable() -> None:
        try:
            while commands.poll():
                inbox.put_nowait(commands.recv())
        except (EOFError, OSError):  # the parent is gone: stop
            loop.remove_reader(commands.fileno())
            inbox.put_nowait(None)

    loop.add_reader(commands.fileno(), readable)
    _send(out, ("ready", None))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    client: httpx.AsyncClient | None = None
    try:
        while (msg := await inbox.get()) is not None and msg[0] != "exit":
            if msg[0] == "level":
                plan: Plan = msg[1]
                if client is None:
                    timeout = httpx.Timeout(plan.request_timeout, connect=10.0)
                    client = httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
                if not await _level(plan, client, inbox, out):
                    break
    finally:
        if client is not None:
            await client.aclose()


async def _level(plan: Plan, client: httpx.AsyncClient, inbox: asyncio.Queue[tuple[Any, ...] | None], out: Connection) -> bool:
    """Send this sender's share of the level's arrivals until told to stop; False: the parent is gone."""
    live: dict[int, RequestRecord] = {}
    shipped: dict[int, tuple[int, bool, bool]] = {}
    tasks: set[asyncio.Task[Any]] = set()  # in flight only: a finished one is dropped (a 10-minute run starts ~10^5)
    gate = asyncio.Semaphore(plan.cap)

    async def one(i: int, at: float) -> None:
        session = plan.source.session(plan.first_request + i)
        for k, turn in enumerate(session.turns):
            if k:  # a later turn: after the last one's end and the session's think time
                if turn.think_s > 0:
                    await asyncio.sleep(turn.think_s)
                at = time.perf_counter()
            if plan.context is not None and turn.prompt_tokens + turn.output > plan.context:
                return  # longer than the server holds (the level counts it from the workload)
            rec = live[i * MAX_TURNS + k] = RequestRecord(
                ok=False, started=at, session=session.index, turn=k, asked_prompt=turn.prompt_tokens, asked_output=turn.output
            )  # sent: when its bytes are written (stream_request)
            body = with_prompt({**plan.body, "max_tokens": turn.output}, plan.api, plan.source.text(session, k))
            try:
                rec.at_gate = time.perf_counter()
                async with gate:
                    rec.queued = (
                        time.perf_counter() - rec.at_gate
                    )  # at the in-flight cap: the server's queue, not the client's lag
                    await stream_request(
                        client, plan.url, body, plan.headers, rec=rec, cached_field=plan.cached_field, arrived=rec.started
                    )
            except asyncio.CancelledError:
                rec.cancelled = True
                raise
            if not rec.ok:
                return  # a failed turn ends its session

    async def arrivals() -> None:
        for i, offset in enumerate(plan.source.arrivals(plan.rate, plan.seed, plan.first_request)):
            if i % plan.senders != plan.index:
                continue
            at = plan.t0 + offset
            if (delay := at - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(i, at))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    async def flushing() -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            _flush(live, shipped, out)

    sending = asyncio.create_task(arrivals())
    flusher = asyncio.create_task(flushing())
    msg = await inbox.get()
    await stop_clients([sending, *list(tasks)], grace=plan.request_timeout)
    flusher.cancel()
    _flush(live, shipped, out)
    _send(out, ("stopped", None))
    return msg is not None and msg[0] != "exit"


def _flush(live: dict[int, RequestRecord], shipped: dict[int, tuple[int, bool, bool]], out: Connection) -> None:
    """Ship what changed since the last flush: new arrivals, a request's bytes written, new stamps,
    ends (then forgotten)."""
    deltas: list[Delta] = []
    for i, rec in list(live.items()):
        had = shipped.get(i)
        done = rec.e2e is not None or rec.cancelled
        now = (len(rec.stamps), rec.sent is not None, rec.at_gate is not None)
        if had == now and not done:
            continue
        new = rec.stamps[had[0] if had else 0 :]
        deltas.append(
            (i, rec.started, rec.sent, rec.ttft, rec.e2e, new, rec.prompt_tokens, rec.completion_tokens, rec.cached_tokens,
             rec.error, rec.ok, rec.cancelled, rec.queued, rec.at_gate, rec.session, rec.asked_prompt, rec.asked_output)
        )  # fmt: skip
        shipped[i] = now
        if done:
            del live[i], shipped[i]
    if deltas:
        _send(out, ("d", deltas))


def _send(out: Connection, message: tuple[str, Any]) -> None:
    """To the parent; a parent that is gone (killed) is no error here: the command pipe's end stops us."""
    try:
        out.send(message)
    except OSError:
        pass
