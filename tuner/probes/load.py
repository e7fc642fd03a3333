"""Load probe: streamed OpenAI-compatible requests at a sweep of concurrency levels.

Token counts come from the server's ``usage`` (``stream_options.include_usage``); the client's
own count of streamed content chunks is kept beside it and a mismatch over 1 % is flagged.
Failed requests are counted as errors and excluded from every latency.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tuner.probes._base import Probe, ServerHandle
from tuner.probes._stats import percentiles
from tuner.probes._tokens import Tokenizer, filler_words
from tuner.records import ProbeResult
from tuner.space._model import LoadProbeSpec

__all__ = ["LoadProbe", "RequestRecord", "stream_request"]

logger = logging.getLogger(__name__)

LATENCIES = ("ttft", "tpot", "itl", "e2e")
PCTS = (50, 90, 99)
LEVEL_METRICS = (
    "output_tok_s",
    "total_tok_s",
    "req_s",
    "error_rate",
    "errors",
    *(f"{lat}_p{p}" for lat in LATENCIES for p in PCTS),
)
MAX_ERROR_RATE = 0.5
SATURATION_GAIN = 0.05


@dataclass
class RequestRecord:
    ok: bool
    started: float
    ttft: float | None = None
    e2e: float | None = None
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None


async def stream_request(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> RequestRecord:
    """One streamed request; never raises for a failed request, records it instead."""
    started = time.perf_counter()
    rec = RequestRecord(ok=False, started=started)
    last = started
    try:
        async with client.stream("POST", url, json=body, headers=headers) as reply:
            if reply.status_code != 200:
                rec.error = f"HTTP {reply.status_code}: {(await reply.aread()).decode(errors='replace')[:200]}"
                return rec
            async for line in reply.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if event.get("error"):
                    rec.error = f"stream error: {str(event['error'])[:200]}"
                    return rec
                if _has_content(event):
                    now = time.perf_counter()
                    if rec.ttft is None:
                        rec.ttft = now - started
                    else:
                        rec.gaps.append(now - last)
                    last = now
                    rec.chunks += 1
                usage = event.get("usage")
                if usage:
                    rec.prompt_tokens = usage.get("prompt_tokens")
                    rec.completion_tokens = usage.get("completion_tokens")
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:200]
        return rec
    rec.e2e = time.perf_counter() - started
    rec.ok = rec.ttft is not None
    if not rec.ok:
        rec.error = "stream ended without any token"
    return rec


def _has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


class LoadProbe(Probe):
    name = "load"
    spec: LoadProbeSpec

    @classmethod
    def metric_names(cls, spec: LoadProbeSpec) -> set[str]:
        names = {f"{m}@{c}" for m in LEVEL_METRICS for c in spec.concurrency}
        names |= set(LEVEL_METRICS) | {"token_mismatch"}
        return names

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    async def _run(self, server: ServerHandle) -> ProbeResult:
        spec = self.spec
        levels = sorted(set(spec.concurrency))
        limits = httpx.Limits(max_connections=max(levels) + 4, max_keepalive_connections=max(levels) + 4)
        timeout = httpx.Timeout(spec.request_timeout, connect=10.0)
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
            prompts = await self._prompts(client, server, spec.warmup + spec.requests * len(levels))
            warm = [await stream_request(client, *self._request(server, p)) for p in prompts[: spec.warmup]]
            if spec.warmup and not any(r.ok for r in warm):
                logger.warning("every warmup request failed: %s", warm[0].error)
            queue = prompts[spec.warmup :]
            results: dict[int, dict[str, Any]] = {}
            stop_reason = "completed"
            for level in levels:
                batch, queue = queue[: spec.requests], queue[spec.requests :]
                results[level] = await self._level(client, server, batch, level)
                stop_reason = _stop_reason(results, level, spec.target_concurrency)
                if stop_reason != "completed":
                    break
        return self._result(results, stop_reason)

    async def _prompts(self, client: httpx.AsyncClient, server: ServerHandle, count: int) -> list[str]:
        if self.spec.dataset:
            return _dataset_prompts(self.spec.dataset, count)
        tokenizer = Tokenizer(client, server.url, server.model)
        target = self.spec.prompt_tokens
        words = filler_words(target * 2 + 16, seed=0)
        text, tokens = await tokenizer.fit(lambda n: " ".join(words[:n]), target)
        logger.debug("prompt of %d tokens (asked %d)", tokens, target)
        # Distinct prefixes defeat prompt caching between requests; the rest stays the same length.
        return [f"{i % 10}{text}" for i in range(count)]

    def _request(self, server: ServerHandle, prompt: str) -> tuple[str, dict[str, Any], dict[str, str]]:
        n = self.spec.output_tokens
        body: dict[str, Any] = {
            "model": server.model,
            "max_tokens": n,
            "min_tokens": n,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.spec.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            return f"{server.url}/v1/chat/completions", body, server.headers
        body["prompt"] = prompt
        return f"{server.url}/v1/completions", body, server.headers

    async def _level(
        self, client: httpx.AsyncClient, server: ServerHandle, prompts: list[str], concurrency: int
    ) -> dict[str, Any]:
        pending = list(reversed(prompts))
        records: list[RequestRecord] = []
        began = time.perf_counter()
        until = began + self.spec.duration if self.spec.duration else None

        async def worker() -> None:
            while pending and (until is None or time.perf_counter() < until):
                prompt = pending.pop()
                if until is not None:
                    pending.insert(0, prompt)  # a timed level cycles through its prompts
                records.append(await stream_request(client, *self._request(server, prompt)))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return summarize(records, time.perf_counter() - began, self.spec.output_tokens)

    def _result(self, levels: dict[int, dict[str, Any]], stop_reason: str) -> ProbeResult:
        metrics: dict[str, float] = {}
        for level, summary in levels.items():
            metrics.update({f"{m}@{level}": summary[m] for m in LEVEL_METRICS if summary.get(m) is not None})
        target = levels.get(self.spec.target_concurrency)
        if target is not None:
            metrics.update({m: target[m] for m in LEVEL_METRICS if target.get(m) is not None})
        mismatch = any(s["token_mismatch"] for s in levels.values())
        metrics["token_mismatch"] = float(mismatch)
        details = {"levels": {str(k): v for k, v in levels.items()}, "stop_reason": stop_reason}
        return ProbeResult(self.name, metrics, details)


def summarize(records: list[RequestRecord], wall: float, expected_output: int) -> dict[str, Any]:
    """Level figures. Only successful requests count toward tokens and latencies."""
    ok = [r for r in records if r.ok]
    errors = [r for r in records if not r.ok]
    out_tokens = sum(r.completion_tokens if r.completion_tokens is not None else r.chunks for r in ok)
    in_tokens = sum(r.prompt_tokens or 0 for r in ok)
    client_tokens = sum(r.chunks for r in ok)
    server_known = all(r.completion_tokens is not None for r in ok)
    summary: dict[str, Any] = {
        "requests": len(records),
        "errors": float(len(errors)),
        "error_rate": len(errors) / len(records) if records else 1.0,
        "first_error": errors[0].error if errors else None,
        "wall_s": wall,
        "output_tokens": out_tokens,
        "prompt_tokens": in_tokens,
        "client_output_tokens": client_tokens,
        "usage_reported": server_known,
        "token_mismatch": bool(out_tokens) and abs(client_tokens - out_tokens) / out_tokens > 0.01,
        "short_outputs": sum(1 for r in ok if (r.completion_tokens or r.chunks) < expected_output),
        "output_tok_s": out_tokens / wall if wall > 0 else 0.0,
        "total_tok_s": (out_tokens + in_tokens) / wall if wall > 0 else 0.0,
        "req_s": len(ok) / wall if wall > 0 else 0.0,
    }
    samples = {
        "ttft": [r.ttft for r in ok if r.ttft is not None],
        "e2e": [r.e2e for r in ok if r.e2e is not None],
        "itl": [g for r in ok for g in r.gaps],
        "tpot": [
            (r.e2e - r.ttft) / (n - 1)
            for r in ok
            if r.e2e is not None and r.ttft is not None and (n := (r.completion_tokens or r.chunks)) > 1
        ],
    }
    for name, values in samples.items():
        for p, value in percentiles(values, PCTS).items():
            summary[f"{name}_p{p}"] = value
    return summary


def _stop_reason(results: dict[int, dict[str, Any]], level: int, target: int) -> str:
    current = results[level]
    if current["error_rate"] > MAX_ERROR_RATE:
        return f"error rate {current['error_rate']:.0%} at concurrency {level} > {MAX_ERROR_RATE:.0%}"
    lower = [lv for lv in results if lv < level]
    if level < target or not lower:
        return "completed"
    prev = results[max(lower)]
    gain = current["output_tok_s"] / prev["output_tok_s"] - 1 if prev["output_tok_s"] else 1.0
    ttft_up = (current.get("ttft_p50") or 0) > (prev.get("ttft_p50") or 0)
    if level > target and gain < SATURATION_GAIN and ttft_up:
        return f"saturated at concurrency {level}: throughput +{gain:.1%} while TTFT p50 rose"
    return "completed"


def _dataset_prompts(path: str, count: int) -> list[str]:
    """Prompts from a JSONL file ({"prompt": ...} or {"messages": [...]}), cycled to ``count``."""
    texts = []
    with open(path) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                text = row.get("prompt") or "\n".join(m.get("content", "") for m in row.get("messages", []))
                if text:
                    texts.append(text)
    if not texts:
        raise ValueError(f"{path}: no prompts (each line needs 'prompt' or 'messages')")
    return [texts[i % len(texts)] for i in range(count)]
