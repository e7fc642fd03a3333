"""Recall probe: a needle (a random passcode) at several depths of filler text, at a ladder of
prompt lengths measured with the server's tokenizer. Temperature 0, the server applies its chat
template, exact-match scoring.

A rung ``L`` is one request of at most ``L`` tokens in all (chat-templated prompt and answer). The
default ladder (``lengths: auto``) is derived from the server's own per-request context: powers of
two from ``start`` below it, then the context itself; a config's recall-verified context is the
longest rung it passed, so it can reach what the config was told to serve, and no more. The
ladder stops at the first failing rung, and (fixed ladders) at the first that does not fit."""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from typing import Any

import httpx

from tuner.base import progress
from tuner.base.exceptions import ProbeError
from tuner.base.records import ProbeResult
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._tokens import Tokenizer
from tuner.space.schema import RecallProbeSpec

__all__ = ["RecallProbe", "ladder"]

logger = logging.getLogger(__name__)

ANSWER_TOKENS = 16
TEMPLATE_ALLOWANCE = 64  # chat-template tokens around the user message (SmolLM2 adds a system prompt)
# The passkey-retrieval haystack (Mohtashami & Jaggi, "Landmark Attention", 2023).
INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n\n"
)
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
QUESTION = "\n\nWhat is the pass key? Answer with the number only."
GATES = "amber birch cedar delta ember falcon granite harbor indigo juniper kestrel lotus maple".split()


def ladder(spec: RecallProbeSpec, limit: int | None) -> list[int]:
    """The rungs to climb: the spec's fixed lengths, or powers of two from ``start`` below the
    per-request context ``limit`` and then ``limit`` itself."""
    if spec.lengths != "auto":
        return list(spec.lengths)
    if limit is None:
        raise ProbeError("probes.recall.lengths is auto, but the engine reported no per-request context: give a list of lengths")
    rungs, length = [], spec.start
    while length < limit:
        rungs.append(length)
        length *= 2
    return [*rungs, limit]


class RecallProbe(Probe):
    name = "recall"
    spec: RecallProbeSpec

    @classmethod
    def metric_names(cls, spec: RecallProbeSpec) -> set[str]:
        names = {"effective_context", "cases", "passed", "context_limit"}
        return names if spec.lengths == "auto" else names | {f"recall@{n}" for n in spec.lengths}

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    async def _run(self, server: ServerHandle) -> ProbeResult:
        limit = server.capacity.context_per_request
        rungs = ladder(self.spec, limit)
        rng = random.Random(self.spec.seed)
        table: dict[str, dict[str, Any]] = {}
        recall_at: dict[str, float] = {}
        metrics: dict[str, float] = {"effective_context": 0.0, "cases": 0.0, "passed": 0.0, "context_limit": float(limit or 0)}
        stop = "completed"
        timeout = httpx.Timeout(self.spec.request_timeout, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            tokenizer = Tokenizer(client, server.url, server.model, server.headers)
            for i, length in enumerate(rungs, 1):
                progress.report(f"recall: rung {i}/{len(rungs)}, {length:,} tokens")
                if limit is not None and length > limit:
                    stop = f"length {length} does not fit the per-request context {limit}"
                    break
                row = {}
                for depth in self.spec.depths:
                    for r in range(self.spec.repeats):
                        key = str(depth) if self.spec.repeats == 1 else f"{depth}/{r}"
                        row[key] = await self._case(client, tokenizer, server, length, depth, rng)
                table[str(length)] = row
                recall = sum(c["passed"] for c in row.values()) / len(row)
                recall_at[str(length)] = recall
                metrics["cases"] += len(row)
                metrics["passed"] += sum(c["passed"] for c in row.values())
                if recall < self.spec.threshold:
                    stop = f"recall {recall:.2f} at {length} tokens < threshold {self.spec.threshold}"
                    break
                metrics["effective_context"] = float(length)
        if self.spec.lengths != "auto":
            metrics.update({f"recall@{n}": v for n, v in recall_at.items()})
        details = {"table": table, "recall": recall_at, "ladder": rungs, "stop_reason": stop, "context_limit": limit}
        return ProbeResult(self.name, metrics, details)

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
        budget = length - ANSWER_TOKENS - TEMPLATE_ALLOWANCE
        if self.spec.distractors:
            gate, *others = rng.sample(GATES, 1 + min(self.spec.distractors, len(GATES) - 1))
            others += [f"{rng.choice(GATES)}-{i}" for i in range(self.spec.distractors - len(others))]
            needle = f"The pass key for gate {gate} is {code}. "
            placed = [(depth, needle)] + [
                (rng.random(), f"The pass key for gate {o} is {rng.randint(10000, 99999)}. ") for o in others
            ]
            question = f"\n\nWhat is the pass key for gate {gate}? Answer with the number only."
        else:
            placed = [(depth, f"The pass key is {code}. Remember it. {code} is the pass key. ")]
            question = QUESTION
        placed.sort(key=lambda item: item[0])

        def build(n: int) -> str:
            parts, at = [INTRO], 0
            for where, sentence in placed:
                cut = int(n * where)
                parts += [FILLER * (cut - at), sentence]
                at = cut
            return "".join([*parts, FILLER * (n - at), question])

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
