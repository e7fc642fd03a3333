"""`tune limits` arithmetic and its three ways in."""

from __future__ import annotations

import json

from tests.cli.test_cli import tune
from tests.conftest import FIXTURES
from tuner import engines
from tuner.base.records import Capacity
from tuner.results.limits import Limits, from_config


def test_what_if_concurrency_per_context() -> None:
    lim = Limits(kv_tokens=2454784, max_running_requests=256, cuda_graph_max_bs=32)
    rows = [lim.row(c) for c in (524288, 131072, 32768, 8192)]
    assert [r.concurrent for r in rows] == [4, 18, 74, 256]
    assert [r.capped_by for r in rows] == ["kv pool", "kv pool", "kv pool", "max running requests"]
    assert [r.graph_fast_path for r in rows] == [4, 18, 32, 32]
    assert any("only <= 32 running requests use CUDA graphs" in w for w in lim.warnings())
    assert any("unbounded" in w for w in lim.warnings())


def test_context_beyond_per_call_limit_runs_nothing() -> None:
    row = Limits(kv_tokens=100000, max_running_requests=8, context_per_request=8192).row(16384)
    assert (row.concurrent, row.capped_by, row.fits_per_call) == (0, "per-call context", False)


def test_bounded_queue_is_not_flagged() -> None:
    assert not any("unbounded" in w for w in Limits(max_queued_requests=64).warnings())


def test_engine_words_override_flags() -> None:
    configured = engines.get("llamacpp").configured_limits({"ctx-size": 4096, "parallel": 2})
    assert configured["context_per_request"] == 2048 and configured["max_queued_requests"] is None
    cap = Capacity(kv_tokens=4096, max_running_requests=2, context_per_request=2048, sources={"log": {}})
    lim = from_config(configured, cap)
    assert lim.sources["kv_tokens"] == "engine (log)"
    assert lim.row(1024).concurrent == 2


def test_sglang_configured_limits_from_flags() -> None:
    lim = engines.get("sglang").configured_limits(
        {"max-running-requests": 256, "cuda-graph-max-bs": 32, "context-length": 524288, "max-queued-requests": 512}
    )
    assert lim["cuda_graph_max_bs"] == 32 and lim["max_queued_requests"] == 512


def test_cli_what_if_prints_the_four_numbers() -> None:
    out = tune(
        "limits",
        "--kv-tokens",
        "2454784",
        "--max-running-requests",
        "256",
        "--cuda-graph-max-bs",
        "32",
        "--contexts",
        "524288,131072,32768,8192",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["concurrent"] for r in data["contexts"]] == [4, 18, 74, 256]
    assert data["queue_unbounded"] is True
    text = tune(
        "limits",
        "--kv-tokens",
        "2454784",
        "--max-running-requests",
        "256",
        "--cuda-graph-max-bs",
        "32",
        "--contexts",
        "524288,131072,32768,8192",
    ).stdout
    assert "only <= 32 running requests use CUDA graphs" in text


def test_cli_from_a_real_log() -> None:
    out = tune("limits", "--engine", "llamacpp", "--log", str(FIXTURES / "llamacpp" / "ok_startup.log"), "--json")
    data = json.loads(out.stdout)
    assert data["kv_tokens"] == 4096 and data["max_running_requests"] == 2 and data["context_per_request"] == 2048


def test_cli_needs_an_input() -> None:
    out = tune("limits")
    assert out.returncode == 2 and "needs --study/--trial" in out.stderr


def test_the_measured_slo_load_sits_beside_the_capacity_derived_calls() -> None:
    from optuna.trial import TrialState

    from tuner.results.limits import for_trial
    from tuner.trials import TrialRecord

    metrics = {"slo.concurrency": 3.0, "slo.concurrency_violated": 4.0, "slo.goodput": 85.5}
    trial = TrialRecord(0, TrialState.COMPLETE, {}, metrics=metrics, capacity={"kv_tokens": 4096, "max_running_requests": 2})
    limits = for_trial({"context_per_request": 2048}, trial)
    assert (limits.slo_concurrency, limits.slo_broke_at, limits.slo_goodput) == (3, 4, 85.5)
    text = limits.render([2048])
    assert "  parallel calls in SLO   3   (at 85.5 output tok/s; 4 break it)" in text
    open_loop = {"slo.rate": 2.5, "slo.rate_violated": 3.0, "slo.goodput": 60.0}
    rate_trial = TrialRecord(1, TrialState.COMPLETE, {}, metrics=open_loop, capacity={"kv_tokens": 4096})
    rate_text = for_trial({"context_per_request": 2048}, rate_trial).render([2048])
    assert "  requests/s in SLO       2.5   (at 60.0 output tok/s; 3/s break it)" in rate_text
    assert "parallel calls in SLO" not in rate_text
    assert "  max running requests    2" in text


def test_the_fast_path_is_the_graph_cap_only_where_more_may_run() -> None:
    """SGLang with 256 running and graphs to 128 (the twelfth session's space) tips past 128 into
    eager steps; with 128 running it never leaves its graphs. vLLM's largest capture size under
    max-num-seqs is such a cap; enforce-eager has no graphs, and llama.cpp none to leave."""
    sglang, vllm = engines.get("sglang"), engines.get("vllm")
    assert sglang.fast_path({"cuda-graph-max-bs": 128, "max-running-requests": 256}) == 128
    assert sglang.fast_path({"cuda-graph-max-bs-decode": 64}) == 64  # running: the engine's own choice, may be more
    assert sglang.fast_path({"cuda-graph-max-bs": 128, "max-running-requests": 128}) is None
    assert sglang.fast_path({"max-running-requests": 256}) is None  # its graph cap is the engine's default: unknown here
    capture = {"compilation-config": {"max_cudagraph_capture_size": 64}}
    assert vllm.fast_path({**capture, "max-num-seqs": 256}) == 64
    assert vllm.fast_path({**capture, "max-num-seqs": 64}) is None
    assert vllm.fast_path({**capture, "max-num-seqs": 256, "enforce-eager": True}) is None
    assert engines.get("llamacpp").fast_path({"parallel": 4}) is None
