"""Served-context probe: the configured maximum context, at the target concurrency, for real.

A config's context is only a promise until requests that fill it are served side by side: the
seeds' failure class is a buffer sized by the maximum context that allocates (and OOMs) only when
long requests arrive, long after the server said it was ready. ``concurrency`` requests whose
prompts (fresh, exact length) fill the per-request context minus ``output_tokens`` are sent at
once; every one must complete. ``served.context`` is the context they proved: the fewest tokens
(prompt + output) any of them got (0 when any failed), which is below the configured context where
the engine cut outputs short to fit it (``truncated``: SGLang 0.5.17 gives one token less than the
``context_len`` it reports); ``served.ok`` 1 or 0 for a constraint."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

from tuner.base import progress
from tuner.base.exceptions import ProbeError
from tuner.base.records import ProbeResult
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._prompts import PromptMaker, one_token_words
from tuner.probes._stream import request_body, stream_request
from tuner.probes._tokens import Tokenizer
from tuner.space.schema import ServedContextProbeSpec

__all__ = ["ServedContextProbe"]

logger = logging.getLogger(__name__)

CALIBRATION_TOKENS = 64
SEED = 7919  # prompts of their own: never those of the load probe


class ServedContextProbe(Probe):
    name = "served"
    spec: ServedContextProbeSpec

    def __init__(self, spec: ServedContextProbeSpec, *, default_concurrency: int = 1) -> None:
        super().__init__(spec)
        self.concurrency = spec.concurrency or default_concurrency

    @classmethod
    def metric_names(cls, spec: ServedContextProbeSpec) -> set[str]:
        return {"context", "ok", "requests", "errors", "truncated", "prompt_tokens", "seconds", "ttft_max"}

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    async def _run(self, server: ServerHandle) -> ProbeResult:
        limit = server.capacity.context_per_request
        if not limit:
            raise ProbeError("the engine reported no per-request context: the served-context probe has nothing to fill")
        out = self.spec.output_tokens
        asked = limit - server.context_slack - out
        if asked < CALIBRATION_TOKENS:
            raise ProbeError(f"per-request context {limit} leaves no room for a prompt beside {out} output tokens")
        n = self.concurrency
        timeout = httpx.Timeout(self.spec.request_timeout, connect=10.0)
        limits = httpx.Limits(max_connections=n + 2, max_keepalive_connections=n + 2)
        url = f"{server.url}/v1/completions"
        body = {"model": server.model, **request_body(out)}
        async with httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False) as client:
            vocabulary = await one_token_words(Tokenizer(client, server.url, server.model, server.headers))
            small = PromptMaker(vocabulary, CALIBRATION_TOKENS, seed=SEED)
            probe = await stream_request(client, url, {**body, "prompt": small.make(-1), "max_tokens": 1}, server.headers)
            if probe.prompt_tokens is None:
                raise ProbeError(
                    f"the server reports no usage.prompt_tokens: a prompt of exactly {asked} tokens cannot be checked "
                    f"({probe.error})"
                )
            maker = PromptMaker(vocabulary, asked, seed=SEED)
            maker.calibrate(small.sent_words, probe.prompt_tokens)
            progress.report(f"served context: {n} requests of {limit:,} tokens at once")
            began = time.perf_counter()
            records = await asyncio.gather(
                *(stream_request(client, url, {**body, "prompt": maker.make(i)}, server.headers) for i in range(n))
            )
            seconds = time.perf_counter() - began
        failed = [r for r in records if not r.ok]
        short = [r for r in records if r.ok and r.completion_tokens is not None and r.completion_tokens < out]
        sent = sorted({r.prompt_tokens for r in records if r.prompt_tokens is not None})
        ok = not failed and bool(records)
        served = min(
            ((r.prompt_tokens or asked) + (r.completion_tokens if r.completion_tokens is not None else out) for r in records),
            default=0,
        )
        logger.info(
            "served context %d x %d tokens: %s in %.1fs",
            n,
            limit,
            f"ok, {served} each" if ok else f"{len(failed)} failed",
            seconds,
        )
        metrics = {
            "context": float(served if ok else 0),
            "ok": float(ok),
            "requests": float(n),
            "errors": float(len(failed)),
            "truncated": float(len(short)),
            "prompt_tokens": float(sent[-1]) if sent else 0.0,
            "seconds": seconds,
            "ttft_max": max((r.ttft for r in records if r.ttft is not None), default=0.0),
        }
        details = {
            "context_limit": limit,
            "asked_prompt_tokens": asked,
            "prompt_tokens_seen": sent,
            "first_error": failed[0].error if failed else None,
            "output_tokens_min": min((r.completion_tokens for r in records if r.completion_tokens is not None), default=None),
        }
        return ProbeResult(self.name, metrics, details)
