"""The one-token vocabulary: asked of the server's own tokenizer, once per tokenizer a process meets."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path

import pytest

from tests.conftest import llama_server_process
from tuner.probes import _prompts
from tuner.probes._prompts import one_token_words


class _Words:
    """A tokenizer with a word's ids given: words in ``split`` cost two tokens, the others one;
    ``with_ids=False`` answers counts only, as a server whose /tokenize has no ids would."""

    def __init__(self, split: Collection[str] = (), *, offset: int = 0, with_ids: bool = True) -> None:
        self.model = "m"
        self.split, self.offset, self.with_ids = split, offset, with_ids
        self.requests = 0

    def _ids(self, text: str) -> tuple[int, ...]:
        ids: list[int] = [1]  # BOS
        for word in text.split():
            ids += [self.offset + len(word), 7] if word in self.split else [self.offset + len(word)]
        return tuple(ids)

    async def count(self, text: str) -> int:
        self.requests += 1
        return len(self._ids(text))

    async def ids(self, text: str) -> tuple[int, ...] | None:
        self.requests += 1
        return self._ids(text) if self.with_ids else None


@pytest.fixture(autouse=True)
def _nothing_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_prompts, "_KNOWN", {})


def _words(tokenizer: _Words, candidates: list[str]) -> _prompts.Vocabulary:
    return asyncio.run(one_token_words(tokenizer, candidates))  # type: ignore[arg-type]


CANDIDATES = [f"w{i}" for i in range(20)]


def test_a_second_server_of_the_same_tokenizer_costs_one_request() -> None:
    first, second = _Words({"w3"}), _Words({"w3"})
    found = _words(first, CANDIDATES)
    assert "w3" not in found.words and len(found.words) == 19
    assert first.requests == 1 + 2 * 20
    assert _words(second, CANDIDATES) == found and second.requests == 1


def test_another_tokenizer_is_asked_in_full_and_gets_its_own_answer() -> None:
    _words(_Words({"w3"}), CANDIDATES)
    other = _Words({"w4"}, offset=100)  # other ids for the same words
    found = _words(other, CANDIDATES)
    assert other.requests == 1 + 2 * 20 and "w4" not in found.words and "w3" in found.words


def test_a_tokenizer_that_shows_no_ids_is_asked_in_full_every_time() -> None:
    for _ in range(2):
        counts_only = _Words(with_ids=False)
        assert len(_words(counts_only, CANDIDATES).words) == 20 and counts_only.requests == 1 + 2 * 20


def test_other_candidates_are_not_answered_from_the_first_ones() -> None:
    _words(_Words(), CANDIDATES)
    fewer = _Words()
    assert _words(fewer, CANDIDATES[:18]).words == tuple(CANDIDATES[:18]) and fewer.requests == 1 + 2 * 18


@pytest.mark.integration
@pytest.mark.one_core
def test_a_real_llama_servers_vocabulary_is_asked_once_per_process(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    """Two probes of one real server (as two trials of one model): the second sends one /tokenize."""
    import httpx

    from tuner.probes._tokens import Tokenizer

    sent: list[str] = []

    async def vocabulary(url: str, model: str) -> _prompts.Vocabulary:
        async def count(request: httpx.Request) -> None:
            sent.append(request.url.path)

        async with httpx.AsyncClient(trust_env=False, event_hooks={"request": [count]}) as client:
            return await one_token_words(Tokenizer(client, url, model))

    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048}) as server:
        server.wait_ready()
        first = asyncio.run(vocabulary(server.url, str(server.model)))
        asked = len(sent)
        again = asyncio.run(vocabulary(server.url, str(server.model)))
    assert asked == 1 + 2 * len(_prompts._CANDIDATES) and len(first.words) >= _prompts.MIN_WORDS
    assert again == first and len(sent) - asked == 1 and set(sent) == {"/tokenize"}
