"""Load probe: unit tests of the arithmetic; integration against the real llama-server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import handle, llama_server_process, tiny_space
from tuner.app.prepare import validate
from tuner.base.level import levels_in
from tuner.base.records import ProbeResult
from tuner.base.stats import batch_means, percentiles, t975
from tuner.probes import LoadProbe
from tuner.probes._prompts import PromptMaker, Vocabulary
from tuner.probes.load import RequestRecord, per_gpu, summarize
from tuner.space import LoadProbeSpec


def test_percentiles_interpolate_like_numpy() -> None:
    assert percentiles([1, 2, 3, 4], [50, 90, 99]) == {50: 2.5, 90: 3.7, 99: pytest.approx(3.97)}
    assert percentiles([], [50]) == {50: None}


def _rec(started: float, stamps: list[float], *, ok: bool = True, completion: int | None = None, **kw: object) -> RequestRecord:
    rec = RequestRecord(ok=ok, started=started, stamps=list(stamps), **kw)
    if stamps:
        rec.ttft = stamps[0] - started
        rec.e2e = stamps[-1] - started
    rec.completion_tokens = completion if completion is not None else len(stamps)
    return rec


def test_tokens_count_where_their_stamps_fall_not_by_request() -> None:
    # A window [10, 20): a request streaming 10..19.5 counts fully, one that streams 5..14.5
    # counts its 10 tokens inside, one that starts at 19 counts 2, one wholly before counts 0.
    inside = _rec(9.0, [10 + 0.5 * i for i in range(20)])
    straddles = _rec(4.0, [5 + 0.5 * i for i in range(20)])
    late = _rec(18.9, [19.0, 19.5, 20.0, 20.5])
    before = _rec(0.0, [1.0, 2.0])
    s = summarize([inside, straddles, late, before], 10.0, 20.0, batches=5, expected_output=20)
    assert s["output_tok_s"] == pytest.approx((20 + 10 + 2) / 10)
    assert s["requests"] == 2  # inside ended at 19.5, straddles at 14.5; late ends after the window
    assert s["batches"] == 2 and len(s["batch_rates"]) == 2  # sub-windows one request lifetime (~10 s) wide


def test_batch_means_give_a_student_t_interval() -> None:
    # Rates 9, 11, 9, 11 tok/s in four 1 s batches: mean 10, sd 1.1547, t(3) = 3.182
    stamps = [0.5] * 9 + [1.5] * 11 + [2.5] * 9 + [3.5] * 11
    bm = batch_means([(sorted(stamps), 1.0)], 0.0, 4.0, 4)
    assert bm.mean == pytest.approx(10.0)
    assert bm.half_width == pytest.approx(3.182 * 1.1547 / 2, rel=1e-3)
    assert bm.relative_half_width == pytest.approx(bm.half_width / 10)
    assert batch_means([(stamps, 1.0)], 0.0, 4.0, 1).half_width is None  # one batch: no spread
    steady = [i + 0.5 for i in range(4) for _ in range(10)]  # exactly 10 tokens in each batch (seen on CPU)
    assert batch_means([(steady, 1.0)], 0.0, 4.0, 4).half_width is None  # +-0 would claim certainty
    assert t975(1) == 12.706 and t975(1000) == pytest.approx(1.962, abs=1e-3)


def test_chunks_carrying_several_tokens_are_weighted_by_the_servers_count() -> None:
    rec = _rec(0.0, [1.0, 2.0], completion=6)  # 2 chunks, 6 tokens by usage: 3 per chunk
    assert summarize([rec], 0.0, 4.0, batches=2, expected_output=6)["output_tok_s"] == pytest.approx(6 / 4)


def test_failed_requests_are_errors_not_latencies_and_cancelled_ones_neither() -> None:
    ok = _rec(0.0, [0.1 + 0.1 * i for i in range(10)], prompt_tokens=32)
    fail = RequestRecord(ok=False, started=0.5, e2e=0.1, error="HTTP 500: boom")
    cancelled = _rec(1.5, [1.6, 1.7], ok=False, cancelled=True)
    cancelled.e2e = None
    s = summarize([ok, ok, fail, cancelled], 0.0, 2.0, batches=2, expected_output=10)
    assert s["errors"] == 1 and s["error_rate"] == pytest.approx(1 / 3)
    assert s["first_error"] == "HTTP 500: boom" and s["first_error_at_s"] == pytest.approx(0.6)
    assert s["ttft_p99"] == pytest.approx(0.1) and s["ttft_n"] == 2 and s["e2e_p50"] == pytest.approx(1.0)
    assert s["tpot_p50"] == pytest.approx(0.9 / 9)
    assert s["output_tok_s"] == pytest.approx((10 + 10 + 2) / 2)  # the cancelled one's tokens were streamed


def test_requests_still_waiting_for_a_first_token_bound_the_ttft_p99_from_below() -> None:
    """Past saturation the requests that end are the early ones: 2 ended with TTFT 0.2 s, 8 still
    queued at the window's end (4 s). The ended ones alone say p99 0.2 s; with the waits so far
    (1..8 s, lower bounds of their TTFTs) the p99 is at least 7.91 s, and an SLO check sees it."""
    ended = [_rec(7.0, [7.2 + 0.05 * i for i in range(4)]) for _ in range(2)]
    queued = []
    for wait in range(1, 9):
        rec = _rec(10.0 - wait, [], ok=False, cancelled=True)
        rec.e2e = None
        queued.append(rec)
    failed_early = RequestRecord(ok=False, started=1.0, e2e=0.5, error="HTTP 503")  # ended before the close
    streaming = _rec(9.0, [9.1, 9.5], ok=False, cancelled=True)  # had its first token: not waiting
    streaming.e2e = None
    s = summarize([*ended, *queued, failed_early, streaming], 6.0, 10.0, batches=2, expected_output=4)
    assert s["ttft_p99"] == pytest.approx(0.2) and s["waiting"] == 8
    assert s["ttft_p99_censored"] == pytest.approx(percentiles([0.2, 0.2, *range(1, 9)], [99])[99])
    from tuner.space import SloTargets

    assert SloTargets(ttft_p99=1.0).violated(s) == ["ttft_p99 >= 7.91 > 1 (8 still waiting)"]
    calm = summarize(ended, 6.0, 10.0, batches=2, expected_output=4)
    assert calm["waiting"] == 0 and calm["ttft_p99_censored"] == calm["ttft_p99"]


def test_the_open_loop_sends_at_most_twice_what_the_engine_runs_at_once() -> None:
    from tuner.base.records import Capacity
    from tuner.probes.load import in_flight_cap

    assert in_flight_cap(Capacity(kv_tokens=2048, max_running_requests=2), 72) == 2 * 2 + 8  # 2 llama.cpp slots
    assert in_flight_cap(Capacity(kv_tokens=167_136), 640) == 2 * 261 + 8  # vLLM: what the KV pool holds
    assert in_flight_cap(Capacity(), 640) == 1024


def test_client_and_server_token_counts_disagreeing_is_flagged() -> None:
    rec = _rec(0.0, [0.1 * i + 0.1 for i in range(8)], completion=10)
    assert summarize([rec], 0.0, 1.0, 2, expected_output=10)["token_mismatch"] is True
    rec = _rec(0.0, [0.05 * i + 0.05 for i in range(10)], completion=10)
    assert summarize([rec], 0.0, 1.0, 2, expected_output=10)["token_mismatch"] is False


def test_prompt_exactness_and_cache_hit_rate() -> None:
    a = _rec(0.0, [0.5], prompt_tokens=128, cached_tokens=0)
    b = _rec(0.0, [0.6], prompt_tokens=128, cached_tokens=64)
    c = _rec(0.0, [0.7], prompt_tokens=129)
    s = summarize([a, b, c], 0.0, 1.0, 2, expected_output=1, asked_prompt=128)
    assert s["prompt_tokens_exact"] == pytest.approx(2 / 3)
    assert s["cache_hit_rate"] == pytest.approx(64 / 256)
    assert (s["prompt_tokens_min"], s["prompt_tokens_max"]) == (128, 129)


def test_prompts_are_distinct_with_an_optional_shared_prefix() -> None:
    words = Vocabulary([f"w{i}" for i in range(20)], ["w0", "w1", "w2"])
    maker = PromptMaker(words, 40)
    maker.calibrate(40, 41)  # the server adds one token (BOS)
    assert maker.overhead == 1 and len(maker.make(0).split()) == 39
    assert all(maker.make(i).split()[0] in words.first for i in range(50))  # one token at the start too
    prompts = [maker.make(i) for i in range(200)]
    assert len({p.split()[0:4].__repr__() for p in prompts}) > 150  # no shared prefixes to speak of
    shared = PromptMaker(words, 40, prefix_tokens=10)
    x, y = shared.make(1).split(), shared.make(2).split()
    assert x[:10] == y[:10] and x[10:] != y[10:] and len(x) == 40


def test_a_request_carries_the_clients_sampling_and_the_probe_s_exact_length() -> None:
    """``request`` fields reach every request's body over the greedy default; the length is
    ``max_tokens`` with ``ignore_eos``, and no ``min_tokens`` (on SGLang a penalizer on every
    decode step, which neither its bench nor users' clients send)."""
    from tuner.probes import ServerHandle

    server = ServerHandle("http://127.0.0.1:1", "m", None)
    url, body, _ = LoadProbe(LoadProbeSpec(output_tokens=7, request={"temperature": 0.7, "top_p": 0.9}))._template(server)
    assert url == "http://127.0.0.1:1/v1/completions"
    assert body["temperature"] == 0.7 and body["top_p"] == 0.9
    assert body["max_tokens"] == 7 and body["ignore_eos"] is True and "min_tokens" not in body
    _, plain, _ = LoadProbe(LoadProbeSpec(output_tokens=7))._template(server)
    assert plain["temperature"] == 0.0 and "top_p" not in plain
    assert {k: v for k, v in plain.items() if k != "temperature"} == {
        k: v for k, v in body.items() if k not in ("temperature", "top_p")
    }


def test_metric_names_cover_levels_and_target() -> None:
    names = LoadProbe.metric_names(LoadProbeSpec(concurrency=[1, 4], target=4))
    assert {"output_tok_s@1", "output_tok_s@4", "output_tok_s", "ttft_p99@4", "error_rate"} <= names


@pytest.mark.integration
@pytest.mark.one_core
def test_load_probe_on_real_llama_server(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2}) as server:
        server.wait_ready()
        spec = LoadProbeSpec(concurrency=[1, 2], prompt_tokens=48, output_tokens=12, duration=2, max_duration=3, warmup=1)
        result = LoadProbe(spec).run(handle(server))
    m = result.metrics
    assert m["errors@1"] == 0 and m["errors@2"] == 0
    assert m["output_tok_s@2"] > 0 and m["output_tok_s"] == m["output_tok_s@2"]
    assert m["token_mismatch"] == 0
    level = levels_in(result.details)["2"]
    assert 2 <= (level.window_s or 0) <= 3.5 and (level.requests or 0) >= 1
    assert level.usage_reported is True and level.short_outputs == 0
    # every prompt exactly as long as asked, by the server's own count, and none served from its cache
    assert level.prompt_tokens_exact == 1.0 and level.prompt_tokens_min == level.prompt_tokens_max == 48
    assert level.cache_hit_rate is not None and level.cache_hit_rate < 0.05
    # a CI from the window's batch means; none where every batch counted the same tokens (zero spread
    # is no evidence), as in one slow suite run (ci14) where level 2's batches all counted the same
    rates = level.batch_rates or ()
    assert level.batches == len(rates) >= 2
    if len(set(rates)) > 1:
        assert m["output_tok_s_ci@2"] > 0
    else:
        assert "output_tok_s_ci@2" not in m, rates
    assert level.ttft_n == level.requests
    assert m["ttft_p50@2"] <= m["e2e_p50@2"]
    assert result.details["stop_reason"] == "completed"


@pytest.mark.integration
@pytest.mark.one_core
def test_capacity_from_log_props_and_slots_agree(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    from tuner.probes.capacity import read_capacity

    with llama_server_process(tmp_path, smollm2, {"ctx-size": 4096, "parallel": 2}) as server:
        server.wait_ready()
        cap = read_capacity(server.adapter, server.log_text(), server.url)
    assert set(cap.sources) == {"log", "/props", "/slots"}
    assert (cap.max_running_requests, cap.context_per_request, cap.kv_tokens) == (2, 2048, 4096)
    assert cap.disagreements == ()


def test_dataset_prompts_cycle_each_with_a_fresh_nonce(tmp_path: Path) -> None:
    from tuner.probes.load import _dataset_prompts

    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a b"}\n\n{"messages": [{"role": "user", "content": "c"}]}\n')
    prompt = _dataset_prompts(str(data))
    first, second, third = prompt(0), prompt(1), prompt(2)
    assert first.endswith("\na b") and second.endswith("\nc") and third.endswith("\na b")
    assert first != third  # the same dataset row, still new to the server


def test_missing_dataset_is_a_space_error() -> None:
    from tuner.base.exceptions import SpaceError

    raw = tiny_space()
    raw["probes"]["load"]["dataset"] = "/nope.jsonl"
    with pytest.raises(SpaceError, match=re.escape("probes.load.dataset: dataset file '/nope.jsonl' does not exist")):
        validate(raw, "t.yaml")


def _absorbs_one_cancel(sent: list[float]):
    """A client loop whose first cancel is lost, the way one arriving inside httpcore's shielded
    response close can be: without a second cancel it goes on sending for ever."""
    import asyncio
    import time

    async def loop() -> None:
        absorbed = False
        while True:
            try:
                await asyncio.sleep(0.01)
                sent.append(time.monotonic())
            except asyncio.CancelledError:
                if absorbed:
                    raise
                absorbed = True

    return loop()


def test_clients_that_outlive_their_cancel_are_cancelled_again() -> None:
    import asyncio
    import time

    from tuner.probes.load import stop_clients

    sent: list[float] = []

    async def main() -> list[asyncio.Task]:
        tasks = [asyncio.create_task(_absorbs_one_cancel(sent)) for _ in range(3)]
        await asyncio.sleep(0.05)
        await asyncio.wait_for(stop_clients(tasks, grace=5.0, every=0.1), timeout=3.0)
        return tasks

    stopped = time.monotonic()
    tasks = asyncio.run(main())
    assert all(t.cancelled() for t in tasks)
    assert time.monotonic() - stopped < 2.0 and sent


def test_a_client_still_running_after_the_grace_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    import asyncio

    from tuner.probes.load import stop_clients

    release = asyncio.Event()

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if release.is_set():
                    raise  # swallows every cancel until the test lets it go

    async def main() -> bool:
        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0.02)
        await asyncio.wait_for(stop_clients([task], grace=0.3, every=0.1), timeout=3.0)
        running = not task.done()
        release.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return running

    with caplog.at_level("WARNING", logger="tuner.probes.load"):
        assert asyncio.run(main())  # stop_clients returned after its grace although the client runs on
    assert "1 load client(s) still running 0s after the level was stopped" in caplog.text


@pytest.mark.integration
@pytest.mark.one_core
def test_a_lost_cancel_does_not_keep_the_level_running(
    tmp_path: Path, llama_server: Path, smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the real llama-server, one client whose cancel is lost (as seen on the H200): the level
    still ends near its window, and no request starts after it ended."""
    import asyncio
    import time
    from concurrent.futures import ThreadPoolExecutor

    import tuner.probes.load as load

    real = load.stream_request
    lost: list[float] = []
    starts: list[float] = []

    async def loses_one_cancel(client, url, body, headers, rec=None, cached_field=None):  # type: ignore[no-untyped-def]
        starts.append(time.perf_counter())
        try:
            return await real(client, url, body, headers, rec=rec, cached_field=cached_field)
        except asyncio.CancelledError:
            if lost:
                raise
            lost.append(time.perf_counter())
            return rec

    monkeypatch.setattr(load, "stream_request", loses_one_cancel)
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2}) as server:
        server.wait_ready()
        spec = LoadProbeSpec(concurrency=[2], prompt_tokens=48, output_tokens=64, duration=2, max_duration=3, warmup=1)
        pool = ThreadPoolExecutor(1)  # not `with`: its exit would wait for a level that never ends
        try:
            result = pool.submit(LoadProbe(spec).run, handle(server)).result(timeout=60)
        finally:
            pool.shutdown(wait=False)
    assert lost, "no cancel was lost: the test did not exercise the case"
    assert result.metrics["errors@2"] == 0 and result.metrics["output_tok_s@2"] > 0
    assert not [s for s in starts if s > lost[0] + 0.05]  # the lost cancel's client sent nothing more


def test_throughput_per_gpu_divides_the_target_level_by_the_partition() -> None:
    """The x2 night's trial 3 (tp 2): 2,000 +- 1,956 tok/s from one server is 1,000 +- 978 per GPU."""
    load = ProbeResult("load", {"output_tok_s": 1999.6, "output_tok_s_ci": 1956.0, "ttft_p99": 0.24}, {"levels": {}})
    two = per_gpu(load, 2)
    assert two.metrics["output_tok_s_per_gpu"] == pytest.approx(999.8) and two.metrics[
        "output_tok_s_per_gpu_ci"
    ] == pytest.approx(978.0)
    assert two.metrics["ttft_p99"] == 0.24 and two.details["gpus"] == 2  # latencies are per request: unchanged
    assert per_gpu(load, 1).metrics["output_tok_s_per_gpu"] == 1999.6
    failed = ProbeResult("load", {"error_rate": 1.0})
    assert per_gpu(failed, 2) == failed  # nothing measured, nothing divided
