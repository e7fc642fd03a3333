"""One streamed OpenAI-compatible request as the client sees it: when each content chunk arrived,
the server's own token counts (usage), its prompt-cache hits, and any failure, recorded, never raised."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["RequestRecord", "request_body", "stop_clients", "stream_request"]

logger = logging.getLogger(__name__)


def request_body(output: int, request: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every probe's request body but its model and prompt: greedy unless ``request`` (a load
    spec's) sets the clients' sampling, ``output`` tokens, streamed with usage. The length is
    exact by ``max_tokens`` with ``ignore_eos`` on every engine here; no ``min_tokens``, which
    SGLang serves with a penalizer on every decode step (tuner sent it until 2026-12-06)."""
    return {
        "temperature": 0.0,
        **(request or {}),
        "max_tokens": output,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@dataclass
class RequestRecord:
    """One request as the client saw it. ``stamps``: arrival time of each streamed content chunk.
    ``started``: when the request arrived (open loop: its scheduled arrival); ``sent``: when its
    body was written to the connection (httpx's ``trace`` extension: a client whose event loop is
    saturated writes late, and this says so); ``at_gate``: when the open loop's sender got to
    it and put it to its in-flight cap, ``queued``: the seconds it waited there before it could be
    written (the server's queue, held on the client)."""

    ok: bool
    started: float
    ttft: float | None = None
    e2e: float | None = None
    stamps: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    error: str | None = None
    cancelled: bool = False
    sent: float | None = None
    queued: float | None = None
    at_gate: float | None = None
    session: int | None = None  # the workload's session (tuner.workload) and this request's turn in it
    turn: int | None = None
    asked_prompt: int | None = None  # the prompt and output tokens the workload asked for
    asked_output: int | None = None
    reusable: int | None = None  # prompt tokens the workload let a cache serve (leading segments sent before)

    @property
    def chunks(self) -> int:
        return len(self.stamps)

    @property
    def ended(self) -> float | None:
        return None if self.e2e is None else self.started + self.e2e

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in itertools.pairwise(self.stamps)]

    @property
    def tokens_per_chunk(self) -> float:
        """The server's token count over the client's chunk count (1.0 without usage)."""
        if self.completion_tokens and self.stamps:
            return self.completion_tokens / len(self.stamps)
        return 1.0


async def stream_request(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    rec: RequestRecord | None = None,
    cached_field: tuple[str, str] | None = None,
    arrived: float | None = None,
) -> RequestRecord:
    """One streamed request; never raises for a failed request, records it instead.

    Pass ``rec`` to watch a request while it streams (its ``stamps`` grow as tokens arrive);
    ``cached_field``: where the engine's events count cached prompt tokens beyond OpenAI's usage
    (the adapter's :attr:`~tuner.engines.EngineAdapter.cached_tokens_field`); ``arrived``: when the
    request arrived, if it waited on the client before being sent (the wait counts in its TTFT)."""
    rec = rec or RequestRecord(ok=False, started=0.0)
    rec.started = time.perf_counter() if arrived is None else arrived

    async def wrote(event: str, info: dict[str, Any]) -> None:
        # the body's write follows this event with no yield to the event loop in between (httpcore,
        # anyio: the write comes first, then a checkpoint), while ".complete" comes after that
        # checkpoint: a saturated loop runs it late, and a sender then looked slower than the server saw
        if event.endswith("send_request_body.started"):
            rec.sent = time.perf_counter()

    try:
        async with client.stream("POST", url, json=body, headers=headers, extensions={"trace": wrote}) as reply:
            if reply.status_code != 200:
                rec.error = f"HTTP {reply.status_code}: {(await reply.aread()).decode(errors='replace')[:200]}"
                return _ended(rec)
            async for line in reply.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("error"):
                    rec.error = f"stream error: {str(event['error'])[:200]}"
                    return _ended(rec)
                _read_event(rec, event, cached_field)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:200]
        return _ended(rec)
    _ended(rec)
    rec.ok = rec.ttft is not None
    if not rec.ok:
        rec.error = "stream ended without any token"
    return rec


def _ended(rec: RequestRecord) -> RequestRecord:
    rec.e2e = time.perf_counter() - rec.started
    return rec


def _read_event(rec: RequestRecord, event: dict[str, Any], cached_field: tuple[str, str] | None = None) -> None:
    if _has_content(event):
        now = time.perf_counter()
        if rec.ttft is None:
            rec.ttft = now - rec.started
        rec.stamps.append(now)
    usage = event.get("usage")
    if usage:
        rec.prompt_tokens = usage.get("prompt_tokens")
        rec.completion_tokens = usage.get("completion_tokens")
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if cached is not None:
            rec.cached_tokens = int(cached)
    if cached_field is not None:
        key, name = cached_field
        found = event.get(key)
        if isinstance(found, dict) and found.get(name) is not None:
            rec.cached_tokens = int(found[name])


def _has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


async def stop_clients(tasks: list[asyncio.Task[Any]], *, grace: float, every: float = 0.5) -> None:
    """Cancel the clients and wait until each has ended, cancelling again every ``every`` seconds.

    One ``Task.cancel()`` is not enough: on the H200 two of a level's 128 clients outlived it and
    went on sending requests for minutes, 2 in flight, while the level waited for them (trial 5 of
    docs/data/context/h200-sglang-smollm2-trials.csv: a cancel that arrives while httpcore closes a response
    inside its cancellation shield can be absorbed). The clients also stop at their next request
    (the caller's stop flag); one still running after ``grace`` is logged and left to the client's
    close, which ends its connection."""
    pending = {t for t in tasks if not t.done()}
    deadline = time.monotonic() + grace
    again = 0
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every)
        if pending:
            again += 1
            if time.monotonic() >= deadline:
                logger.warning("%d load client(s) still running %.0fs after the level was stopped", len(pending), grace)
                return
    if again:
        logger.warning("load clients outlived their cancel (cancelled %d more time(s) before they ended)", again)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            logger.warning("a load client failed: %r", task.exception())
