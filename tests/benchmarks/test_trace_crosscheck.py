"""The trace cross-check reads the server's own token counters around each replay: a counter the
server has not created yet (SGLang creates sglang:cached_tokens_total with the first cached token)
counts 0, not "unknown"; a server without SGLang's metrics gives no figure at all."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from trace_crosscheck import by_counters, counters

from tuner.base.records import Capacity
from tuner.probes import ServerHandle


def _read(text: str) -> dict[str, float | None]:
    async def go() -> dict[str, float | None]:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, text=text))
        async with httpx.AsyncClient(transport=transport) as client:
            return await counters(client, ServerHandle("http://server", "m", Capacity()))

    return asyncio.run(go())


def test_a_counter_not_created_yet_counts_zero_and_the_hit_rate_is_the_replay_s() -> None:
    before = _read('sglang:prompt_tokens_total{is_streaming="true"} 100\nsglang:generation_tokens_total{x="1"} 10\n')
    assert before == {"sglang:prompt_tokens": 100.0, "sglang:cached_tokens": 0.0, "sglang:generation_tokens": 10.0}
    after = _read(
        'sglang:prompt_tokens_total{is_streaming="true"} 1100\n'
        'sglang:cached_tokens_total{cache_source="device"} 600\nsglang:cached_tokens_total{cache_source="host"} 80\n'
        'sglang:generation_tokens_total{x="1"} 410\n'
    )
    found = by_counters(before, after, 2.0)
    assert found == {"server_prompt_tokens": 1000.0, "server_cache_hit_rate": 0.68, "server_output_tok_s": 200.0}


def test_a_server_without_sglang_s_counters_gives_no_figures() -> None:
    none = _read("llamacpp:prompt_tokens_total 5\n")
    assert set(none.values()) == {None}
    assert by_counters(none, none, 1.0) == {
        "server_prompt_tokens": None,
        "server_cache_hit_rate": None,
        "server_output_tok_s": None,
    }
