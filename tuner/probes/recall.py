"""Recall probe: a needle (a random passcode) at several depths of filler text, at a ladder of
prompt lengths measured with the server's tokenizer. Temperature 0, the server applies its chat
template, exact-match scoring. The ladder stops at the first failing length, and at the first
length that does not fit the server's per-request context."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from typing import Any

import httpx

from tuner.probes._base import Probe, ServerHandle
from tuner.probes._tokens import Tokenizer
from tuner.records import ProbeResult
from tuner.space._model import RecallProbeSpec

__all__ = ["RecallProbe"]

logger = logging.getLogger(__name__)

ANSWER_TOKENS = 16
TEMPLATE_ALLOWANCE = 64  # chat-template tokens around the user message
# The passkey-retrieval haystack (Mohtashami & Jaggi, "Landmark Attention", 2023).
INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n\n"
)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = "\n\nWhat is the pass key? Answer with the number only."


class RecallProbe(Probe):
    name = "recall"
    spec: RecallProbeSpec

    @classmethod
    def metric_names(cls, spec: RecallProbeSpec) -> set[str]:
        return {"effective_context", "cases", "passed"} | {f"recall@{n}" for n in spec.lengths}

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    async def _run(self, server: ServerHandle) -> ProbeResult:
        limit = server.capacity.context_per_request
        rng = random.Random(self.spec.seed)
        table: dict[str, dict[str, Any]] = {}
        metrics: dict[str, float] = {"effective_context": 0.0, "cases": 0.0, "passed": 0.0}
        stop = "completed"
        timeout = httpx.Timeout(self.spec.request_timeout, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            tokenizer = Tokenizer(client, server.url, server.model, server.headers)
            for length in self.spec.lengths:
                if limit is not None and length + ANSWER_TOKENS > limit:
                    stop = f"length {length} does not fit the per-request context {limit}"
                    break
                row = {}
                for depth in self.spec.depths:
                    row[str(depth)] = await self._case(client, tokenizer, server, length, depth, rng)
                table[str(length)] = row
                recall = sum(c["passed"] for c in row.values()) / len(row)
                metrics[f"recall@{length}"] = recall
                metrics["cases"] += len(row)
                metrics["passed"] += sum(c["passed"] for c in row.values())
                if recall < self.spec.threshold:
                    stop = f"recall {recall:.2f} at {length} tokens < threshold {self.spec.threshold}"
                    break
                metrics["effective_context"] = float(length)
        return ProbeResult(self.name, metrics, {"table": table, "stop_reason": stop, "context_limit": limit})

    async def _case(
        self,
        client: httpx.AsyncClient,
        tokenizer: Tokenizer,
        server: ServerHandle,
        length: int,
        depth: float,
        rng: random.Random,
    ) -> dict[str, Any]:
        code = str(rng.randint(10000, 99999))
        needle = f"The pass key is {code}. Remember it. {code} is the pass key. "
        budget = length - TEMPLATE_ALLOWANCE

        def build(n: int) -> str:
            cut = int(n * depth)
            return INTRO + FILLER * cut + needle + FILLER * (n - cut) + QUESTION

        content, _ = await tokenizer.fit(build, budget, high=max(2, budget // 10))
        body = {
            "model": server.model,
            "messages": [{"role": "user", "content": content}],
            "temperature": 0.0,
            "max_tokens": ANSWER_TOKENS,
        }
        began = time.perf_counter()
        try:
            reply = await client.post(f"{server.url}/v1/chat/completions", json=body, headers=server.headers)
            reply.raise_for_status()
            data = reply.json()
            answer = data["choices"][0]["message"]["content"] or ""
            prompt_tokens = data.get("usage", {}).get("prompt_tokens")
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            answer, prompt_tokens = f"<error: {exc}>"[:200], None
        passed = re.search(rf"(?<!\d){code}(?!\d)", answer) is not None
        logger.info("recall %d tokens depth %.2f: %s (%r)", length, depth, "pass" if passed else "miss", answer[:40])
        return {
            "passed": passed,
            "answer": answer[:80],
            "expected": code,
            "prompt_tokens": prompt_tokens,
            "seconds": round(time.perf_counter() - began, 2),
        }
