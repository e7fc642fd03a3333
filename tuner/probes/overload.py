"""Overload probe: a burst of ``factor`` x the config's concurrent capacity, all at once.

Counts how many requests were rejected fast (HTTP 429/503), how many queued and for how long
(time to first token beyond the first wave), how many timed out. An engine that rejects nothing
and serves the whole burst by queueing has an unbounded queue: flagged, since under real
overload such a server answers ever later instead of saying no."""

from __future__ import annotations

import asyncio
import time

import httpx

from tuner.base.records import ProbeResult
from tuner.base.stats import percentiles
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._stream import RequestRecord
from tuner.probes._tokens import Tokenizer, filler_words
from tuner.probes.load import request_body, stream_request
from tuner.space.schema import OverloadProbeSpec

__all__ = ["OverloadProbe"]

REJECT_STATUSES = ("HTTP 429", "HTTP 503")


class OverloadProbe(Probe):
    name = "overload"
    spec: OverloadProbeSpec

    @classmethod
    def metric_names(cls, spec: OverloadProbeSpec) -> set[str]:
        return {
            "burst",
            "rejected",
            "completed",
            "timed_out",
            "failed",
            "queue_wait_p50",
            "queue_wait_p99",
            "queue_wait_max",
            "unbounded_queue",
        }

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    async def _run(self, server: ServerHandle) -> ProbeResult:
        capacity = server.capacity.max_running_requests or self.spec.capacity
        burst = min(self.spec.max_burst, max(2, round(capacity * self.spec.factor)))
        timeout = httpx.Timeout(self.spec.request_timeout, connect=10.0)
        limits = httpx.Limits(max_connections=burst + 4, max_keepalive_connections=burst + 4)
        async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:
            words = filler_words(self.spec.prompt_tokens * 2, seed=1)
            text, _ = await Tokenizer(client, server.url, server.model, server.headers).fit(
                lambda n: " ".join(words[:n]), self.spec.prompt_tokens
            )
            body = {"model": server.model, **request_body(self.spec.output_tokens)}
            url = f"{server.url}/v1/completions"
            began = time.perf_counter()
            records = await asyncio.gather(
                *(stream_request(client, url, {**body, "prompt": f"{i} {text}"}, server.headers) for i in range(burst))
            )
            wall = time.perf_counter() - began
        return self._result(records, burst, capacity, wall)

    def _result(self, records: list[RequestRecord], burst: int, capacity: int, wall: float) -> ProbeResult:
        rejected = [r for r in records if not r.ok and r.error and r.error.startswith(REJECT_STATUSES)]
        timed_out = [r for r in records if not r.ok and r.error and "Timeout" in r.error]
        completed = [r for r in records if r.ok]
        failed = len(records) - len(rejected) - len(timed_out) - len(completed)
        waits = sorted(r.ttft for r in completed if r.ttft is not None)
        beyond = waits[capacity:]  # the requests that could not start at once
        pct = percentiles(beyond, (50, 99))
        unbounded = not rejected and len(completed) + len(timed_out) == burst and burst > capacity
        metrics = {
            "burst": float(burst),
            "rejected": float(len(rejected)),
            "completed": float(len(completed)),
            "timed_out": float(len(timed_out)),
            "failed": float(failed),
            "queue_wait_p50": pct[50] or 0.0,
            "queue_wait_p99": pct[99] or 0.0,
            "queue_wait_max": beyond[-1] if beyond else 0.0,
            "unbounded_queue": float(unbounded),
        }
        details = {
            "capacity": capacity,
            "wall_s": wall,
            "rejected_fast_s": max((r.e2e or 0.0 for r in rejected), default=0.0),
            "first_rejection": rejected[0].error if rejected else None,
            "warning": "engine queued the whole burst without rejecting any request: its queue is unbounded"
            if unbounded
            else None,
        }
        return ProbeResult(self.name, metrics, details)
