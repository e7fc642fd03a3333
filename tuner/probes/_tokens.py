"""Prompts of an exact token length, measured with the server's own tokenizer (``/tokenize``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import httpx

__all__ = ["Tokenizer", "filler_words"]

_WORDS = (
    "river stone garden window paper market silver forest candle morning harbor pencil valley "
    "lantern meadow copper island thunder marble orchard canyon feather velvet compass glacier "
    "saddle quartz willow ember prairie beacon tunnel"
).split()


def filler_words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(_WORDS) for _ in range(count)]


class Tokenizer:
    """Counts tokens with the server's ``/tokenize`` endpoint (llama.cpp, vLLM, SGLang all have one)."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, headers: dict[str, str] | None = None) -> None:
        self.client = client
        self.base_url = base_url
        self.model = model
        self.headers = headers  # the API key, where the server requires one

    async def count(self, text: str) -> int:
        data = await self._tokenize(text)
        return int(data["count"]) if "count" in data else len(data["tokens"])

    async def ids(self, text: str) -> tuple[int, ...] | None:
        """The server's token ids for ``text``; None where its ``/tokenize`` answers with no plain ids."""
        tokens = (await self._tokenize(text)).get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        return tuple(tokens)

    async def _tokenize(self, text: str) -> dict[str, Any]:
        reply = await self.client.post(
            f"{self.base_url}/tokenize", json={"content": text, "prompt": text, "model": self.model}, headers=self.headers
        )
        reply.raise_for_status()
        data: dict[str, Any] = reply.json()
        return data

    async def fit(self, build: Callable[[int], str], target: int, low: int = 1, high: int | None = None) -> tuple[str, int]:
        """The longest ``build(n)`` (``n`` words) whose token count is <= ``target``.

        Returns the text and its exact token count. Binary search: ~log2(target) calls."""
        high = high or max(2, target * 2)
        best = (build(low), await self.count(build(low)))
        while low <= high:
            mid = (low + high) // 2
            text = build(mid)
            tokens = await self.count(text)
            if tokens <= target:
                best = (text, tokens)
                low = mid + 1
            else:
                high = mid - 1
        return best
