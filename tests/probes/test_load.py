"""Load probe: unit tests of the arithmetic; integration against the real llama-server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import handle, llama_server_process, tiny_space
from tuner.probes import LoadProbe
from tuner.probes._stats import percentiles
from tuner.probes.load import RequestRecord, summarize
from tuner.space import LoadProbeSpec, validate


def test_percentiles_interpolate_like_numpy() -> None:
    assert percentiles([1, 2, 3, 4], [50, 90, 99]) == {50: 2.5, 90: 3.7, 99: pytest.approx(3.97)}
    assert percentiles([], [50]) == {50: None}


def test_failed_requests_are_errors_not_latencies() -> None:
    ok = RequestRecord(ok=True, started=0, ttft=0.1, e2e=1.1, gaps=[0.1] * 9, chunks=10, prompt_tokens=32, completion_tokens=10)
    slow_fail = RequestRecord(ok=False, started=0, error="HTTP 500: boom")
    s = summarize([ok, ok, slow_fail], wall=2.0, expected_output=10)
    assert s["errors"] == 1 and s["error_rate"] == pytest.approx(1 / 3)
    assert s["first_error"] == "HTTP 500: boom"
    assert s["output_tok_s"] == 10.0  # 20 tokens of the two successes over 2 s
    assert s["ttft_p99"] == pytest.approx(0.1) and s["e2e_p50"] == pytest.approx(1.1)
    assert s["tpot_p50"] == pytest.approx(1.0 / 9)


def test_client_and_server_token_counts_disagreeing_is_flagged() -> None:
    rec = RequestRecord(ok=True, started=0, ttft=0.1, e2e=1.0, chunks=8, completion_tokens=10)
    assert summarize([rec], wall=1.0, expected_output=10)["token_mismatch"] is True
    rec.chunks = 10
    assert summarize([rec], wall=1.0, expected_output=10)["token_mismatch"] is False


def test_metric_names_cover_levels_and_target() -> None:
    names = LoadProbe.metric_names(LoadProbeSpec(concurrency=[1, 4], target=4))
    assert {"output_tok_s@1", "output_tok_s@4", "output_tok_s", "ttft_p99@4", "error_rate"} <= names


@pytest.mark.integration
def test_load_probe_on_real_llama_server(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2}) as server:
        server.wait_ready()
        spec = LoadProbeSpec(concurrency=[1, 2], prompt_tokens=48, output_tokens=12, requests=4, warmup=1)
        result = LoadProbe(spec).run(handle(server))
    m = result.metrics
    assert m["errors@1"] == 0 and m["errors@2"] == 0
    assert m["output_tok_s@2"] > 0 and m["output_tok_s"] == m["output_tok_s@2"]
    assert m["token_mismatch"] == 0
    level = result.details["levels"]["2"]
    assert level["output_tokens"] == 4 * 12  # exact output lengths, counted by the server
    assert level["usage_reported"] is True and level["short_outputs"] == 0
    assert 4 * 40 <= level["prompt_tokens"] <= 4 * 52  # prompts sized with the server's tokenizer
    assert m["ttft_p50@2"] <= m["e2e_p50@2"]
    assert result.details["stop_reason"] == "completed"


@pytest.mark.integration
def test_capacity_from_log_props_and_slots_agree(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    from tuner.probes.capacity import read_capacity

    with llama_server_process(tmp_path, smollm2, {"ctx-size": 4096, "parallel": 2}) as server:
        server.wait_ready()
        cap = read_capacity(server.adapter, server.log_text(), server.url)
    assert set(cap.sources) == {"log", "/props", "/slots"}
    assert (cap.max_running_requests, cap.context_per_request, cap.kv_tokens) == (2, 2048, 4096)
    assert cap.disagreements == ()


def test_dataset_prompts_cycle(tmp_path: Path) -> None:
    from tuner.probes.load import _dataset_prompts

    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a b"}\n\n{"messages": [{"role": "user", "content": "c"}]}\n')
    assert _dataset_prompts(str(data), 3) == ["a b", "c", "a b"]


def test_missing_dataset_is_a_space_error() -> None:
    from tuner.exceptions import SpaceError

    raw = tiny_space()
    raw["probes"]["load"]["dataset"] = "/nope.jsonl"
    with pytest.raises(SpaceError, match="probes.load.dataset: dataset file '/nope.jsonl' does not exist"):
        validate(raw, "t.yaml")
