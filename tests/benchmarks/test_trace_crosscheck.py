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


def test_aiperf_replays_the_same_rows_at_the_rate_and_its_report_is_read_as_ours() -> None:
    """The rows aiperf replays are the trace's first ones, their times scaled to the rate as this
    tool scales them; its report is read per gap (inter_chunk_latency: its inter_token_latency is
    one mean per request, far under the gaps' p99), with the cache hit from the server's usage and
    the send lag against the schedule."""
    import json
    import tempfile

    from trace_crosscheck import aiperf_result, scaled_trace

    from tuner.workload.trace import TraceRow

    rows = tuple(TraceRow(1000.0 + 2000.0 * i, 40 + i, 5, (0, i + 1)) for i in range(10))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        scaled = scaled_trace(rows, 4, own=0.5, rate=2.0, path=out / "t.jsonl")  # 4 x faster, from 0
        sent = [json.loads(line) for line in scaled.read_text().splitlines()]
        assert [r["timestamp"] for r in sent] == [0.0, 500.0, 1000.0, 1500.0]
        assert [r["input_length"] for r in sent] == [40, 41, 42, 43] and sent[3]["hash_ids"] == [0, 4]
        art = out / "art"
        art.mkdir()
        report = {
            "output_token_throughput": {"avg": 9.5}, "total_output_tokens": {"avg": 20.0}, "completed_request_count": {"avg": 4},
            "benchmark_duration": {"avg": 2.0},
            "time_to_first_token": {"p99": 800.0}, "inter_token_latency": {"p99": 100.0}, "inter_chunk_latency": {"p99": 700.0},
            "usage_prompt_tokens": {"avg": 41.5}, "total_usage_prompt_tokens": {"avg": 166.0},
            "total_usage_prompt_cache_read_tokens": {"avg": 41.5},
        }  # fmt: skip
        (art / "profile_export_aiperf.json").write_text(json.dumps(report))
        starts = [0.0, 0.5, 1.06, 1.5]  # the third 60 ms late
        records = [{"metadata": {"benchmark_phase": "profiling", "request_start_ns": int((7 + t) * 1e9)}} for t in starts]
        (art / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        found = aiperf_result(art, [r["timestamp"] / 1000 for r in sent], window=2.0)
    assert found["itl_p99"] == 0.7 and found["ttft_p99"] == 0.8 and found["aiperf_output_tok_s"] == 9.5
    assert found["output_tok_s"] == 10.0  # its output tokens over this tool's window, as this tool counts them
    assert found["cache_hit_rate"] == 0.25 and found["requests"] == 4 and found["prompt_tokens_mean"] == 41.5
    assert found["achieved_rate"] == found["scheduled_rate"] == 2.0
    assert 0.05 < found["send_lag_p99"] <= 0.06


def test_rounds_are_compared_by_the_server_s_counters_else_by_each_client_s_usage() -> None:
    from trace_crosscheck import summarize

    def side(tok: float, usage: float, server: float | None) -> dict:
        return {"output_tok_s": tok, "cache_hit_rate": usage, "server_cache_hit_rate": server, "requests": 4, "failed": 0,
                "achieved_rate": 1.0, "achieved_over_offered": 1.0}  # fmt: skip

    rounds = [
        {"tool": side(10.0, 0.40, None), "bench": side(8.0, 0.42, None)},
        {"tool": side(9.0, 0.5, 0.6), "bench": side(10.0, 0.9, 0.5)},
    ]
    last = summarize(rounds, 1.0, "aiperf")[-1]
    assert "mean 1.075 (min 0.900, max 1.250, 2 round(s))" in last, last
    assert "mean +4.0 points (min -2.0, max +10.0)" in last, last  # round 0 by usage, round 1 by the counters
