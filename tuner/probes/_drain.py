"""A load level starts on a drained server: nothing of the level before it still in flight.

A level's clients are cancelled when its window closes, but the engine may go on with what they
sent (llama-server finishes a slot's request until it notices the hang-up; a queue an overloaded
level built is worked off). A level started then measures the last one's backlog: after a level
that broke, the next would break too, and the search is biased toward "break". :func:`drain`
waits until the engine's own count of requests in flight (running and queued) is zero
(:attr:`~tuner.probes.ServerHandle.in_flight_source`), or, where the engine keeps no such count,
until a 1-token request is answered about as fast as on the idle server; both with a bound.
The count must read zero twice, :data:`POLL_S` apart: llama-server answers ``/slots`` ahead of its
queue, so in the moment between a slot's release and the next queued request taking it every slot
reads idle while requests still wait (CI measured a level on such a server: 7 of 7 requests still
waiting at 2.9 s, at half the rate that had held).

A count that says busy is believed while it changes: a fast 1-token request then says nothing,
because an engine that schedules prefill first (SGLang) answers one at once beside hundreds of
running requests (on the H200 a confirmation step started 0.16 s after a run that broke, judged by
such a request, with 256 requests running and 265 queued by SGLang's own log; it broke at once).
Only a count that stays the same non-zero value for :data:`STALE_S` (a gauge the engine stopped
updating) may be overruled by 1-token requests as fast as on the idle server. Where a 1-token
request can be timed, a count that reads zero twice is also checked by one: llama-server's
``/slots`` does not show the requests waiting for a slot (the cancelled ones of a broken level
among them). After the SLO test's broken level, with ``/slots`` at zero twice, 1-token requests
stayed slow for 5 s more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx

from tuner.engines import counter_total
from tuner.probes._base import ServerHandle

__all__ = ["drain", "in_flight"]

logger = logging.getLogger(__name__)

POLL_S = 0.2
BOUND_S = 120.0  # a server still busy after this is measured anyway (and the level says so)
STALE_S = 5.0  # a busy count unchanged this long is taken for a gauge the engine stopped updating


async def in_flight(client: httpx.AsyncClient, server: ServerHandle) -> int | None:
    """Requests the engine has in flight by its own count; None where it keeps none we can read."""
    if server.in_flight_source is None:
        return None
    path, names = server.in_flight_source
    try:
        reply = await client.get(f"{server.url}{path}", headers=server.headers, timeout=5.0)
    except httpx.HTTPError:
        return None
    if reply.status_code != 200:
        return None
    if path == "/metrics":
        found = [counter_total(reply.text, name) for name in names]
        return None if all(v is None for v in found) else int(sum(v or 0.0 for v in found))
    try:
        items = reply.json()
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    return sum(1 for item in items if isinstance(item, dict) and any(item.get(flag) for flag in names))


async def drain(
    client: httpx.AsyncClient,
    server: ServerHandle,
    ping: Any = None,
    *,
    idle_s: float | None = None,
    bound: float = BOUND_S,
) -> dict[str, Any]:
    """Wait until ``server`` has nothing in flight (at most ``bound`` seconds). Without the
    engine's count, ``ping()`` (an awaitable 1-token request, returning its seconds or None) is
    timed until it is within twice ``idle_s`` (its time on the idle server) plus 50 ms; with the
    count, once it reads zero twice and such a request is that fast, or once it has read the same
    busy value for :data:`STALE_S` (a stale gauge) and such a request is that fast. Returns
    what the level stores: ``drain_s``, ``drained`` and how it was judged (``drained_by``)."""
    began = time.perf_counter()
    can_ping = ping is not None and idle_s is not None
    zeros = 0
    last: int | None = None
    since = began  # when the count last changed

    async def fast() -> bool:  # a 1-token request about as fast as on the idle server
        took = await ping()
        return took is not None and took <= 2 * idle_s + 0.05  # type: ignore[operator]

    while True:
        left = await in_flight(client, server)
        zeros = zeros + 1 if left == 0 else 0
        if zeros >= 2:
            if not can_ping:
                by = "engine count"
                break
            if await fast():  # the queue /slots does not show waits in front of it
                by = "engine count and a 1-token request"
                break
            zeros = 0
        if left == 0 and time.perf_counter() - began < bound:  # read it again a poll later (zero, its 1-token request slow)
            await asyncio.sleep(POLL_S)
            continue
        if left != last:
            last, since = left, time.perf_counter()
        if left is None and not can_ping:
            return {"drain_s": 0.0, "drained": None, "drained_by": "nothing to judge by"}
        stale = left is not None and left != 0 and time.perf_counter() - since >= STALE_S
        if can_ping and (left is None or stale):
            by = "1-token request" if left is None else f"1-token request (the engine's count stuck at {left}: stale)"
            if await fast():
                break
        if time.perf_counter() - began >= bound:
            logger.warning("the server still had requests in flight %.0fs after the last level: measuring anyway", bound)
            return {
                "drain_s": time.perf_counter() - began,
                "drained": False,
                "drained_by": "engine count" if left else "1-token request",
            }
        await asyncio.sleep(POLL_S)
    return {"drain_s": time.perf_counter() - began, "drained": True, "drained_by": by}
