"""The open-loop cross-check splits its rate over several `vllm bench serve` processes: their
detailed results merge into one p99 over every request, summed throughput, and what they delivered."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import goodput_crosscheck
from goodput_crosscheck import behind, bench_split, judged_minutes, merge, minutes, pinned_clients, shares, throughout

from tests.conftest import assert_group_gone
from tuner.space import SloTargets


def _part(starts: list[float], ttft: float, failed: int = 0) -> dict:
    n = len(starts)
    return {
        "completed": n - failed, "failed": failed, "output_throughput": 100.0, "duration": starts[-1] - starts[0] + 1.0,
        "mean_e2el_ms": 1000.0, "start_times": starts, "ttfts": [ttft] * n, "itls": [[0.01, 0.02]] * n,
        "errors": ["boom" if i < failed else "" for i in range(n)],
    }  # fmt: skip


def test_parts_merge_into_one_p99_and_their_delivered_rate() -> None:
    a = _part([i * 0.1 for i in range(101)], ttft=0.2)  # 10 requests/s each over 10 s
    b = _part([i * 0.1 for i in range(101)], ttft=0.8, failed=1)
    merged = merge([a, b], 20.0)
    assert merged["completed"] == 201 and merged["failed"] == 1 and merged["output_throughput"] == 200.0
    assert merged["p99_ttft_ms"] == pytest.approx(800.0) and merged["p99_itl_ms"] == pytest.approx(20.0)
    assert merged["achieved_over_offered"] == pytest.approx(1.0) and merged["delivery_from"] == "send times"
    behind = merge([a, _part([i * 0.125 for i in range(101)], ttft=0.2)], 20.0)  # the second sent 8/s of its 10
    assert behind["achieved_over_offered"] == pytest.approx(0.9)


def test_without_send_times_the_duration_less_a_request_is_the_span() -> None:
    part = _part([i * 0.1 for i in range(101)], ttft=0.2)
    del part["start_times"]
    merged = merge([part], 10.0)
    assert merged["delivery_from"] == "duration less a request" and merged["achieved_over_offered"] == pytest.approx(1.01)


def _closed_part(clients: int, latency: float, gap: float, n: int) -> dict:
    """``clients`` loops, each sending its next request ``gap`` s after the last one ended."""
    starts = sorted(c * 0.01 + i * (latency + gap) for c in range(clients) for i in range(n))
    return {
        "completed": len(starts), "failed": 0, "output_throughput": 50.0, "start_times": starts,
        "ttfts": [latency / 2] * len(starts), "itls": [[latency / 4, latency / 4]] * len(starts),
        "errors": [""] * len(starts),
    }  # fmt: skip


def test_closed_loop_parts_show_the_clients_they_kept_busy() -> None:
    kept = merge([_closed_part(5, 1.0, 0.0, 20), _closed_part(5, 1.0, 0.0, 20)], 10, closed=True)
    assert kept["achieved_concurrency"] == pytest.approx(10.0, rel=0.01) and kept["output_throughput"] == 100.0
    assert kept["achieved_over_offered"] == pytest.approx(1.0, rel=0.01)
    slow = merge([_closed_part(5, 1.0, 0.25, 20)], 5, closed=True)  # a client idles 0.25 s between its requests
    assert slow["achieved_over_offered"] == pytest.approx(0.8, rel=0.02)


def test_clients_split_whole_and_rates_evenly() -> None:
    assert shares(10, 4, whole=True) == [3.0, 3.0, 2.0, 2.0] and shares(3, 4, whole=True) == [1.0, 1.0, 1.0]
    assert shares(60, 4, whole=False) == [15.0] * 4


def test_sglang_s_bench_runs_random_ids_of_the_space_s_lengths_and_its_result_merges(tmp_path: Path) -> None:
    """SGLang's own bench (its 0.5.17 source: sglang/benchmark/serving.py): exact lengths from random
    token ids, every request's details kept; its JSONL result reads in vLLM's names, a failed request
    counted from its error, and its delivery from the run's duration less a request (no send times)."""
    import json

    from goodput_crosscheck import sglang_argv, sglang_result, stubs

    argv = sglang_argv("http://127.0.0.1:9", "/m", ["--request-rate", "6.5"], 1950, (512, 128), tmp_path, "b.json", 1000)
    assert argv[1:3] == ["-m", "sglang.benchmark.serving"] and argv[argv.index("--dataset-name") + 1] == "random-ids"
    assert argv[argv.index("--random-range-ratio") + 1] == "1.0" and "--output-details" in argv
    assert argv[argv.index("--request-rate") + 1] == "6.5" and argv[argv.index("--num-prompts") + 1] == "1950"
    row = {"completed": 99, "duration": 11.0, "output_throughput": 1000.0, "mean_e2e_latency_ms": 1000.0,
           "ttfts": [0.1] * 100, "itls": [[0.02]] * 100, "errors": [""] * 99 + ["timeout"]}  # fmt: skip
    (tmp_path / "b.json").write_text(json.dumps({"completed": 1}) + "\n" + json.dumps(row) + "\n")  # appended: the last counts
    read = sglang_result(tmp_path / "b.json")
    assert read["failed"] == 1 and read["mean_e2el_ms"] == 1000.0
    merged = merge([read], 10.0)
    assert merged["delivery_from"] == "duration less a request" and merged["achieved_over_offered"] == pytest.approx(1.0)
    assert (stubs(tmp_path) / "datasets" / "__init__.py").read_text().startswith("def load_dataset")


CLIENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # outlives its parent unless its group ends
print(sorted(os.sched_getaffinity(0)), os.getpgid(0), flush=True)
time.sleep(float(sys.argv[1]))
sys.exit(int(sys.argv[2]))
"""


def test_pinned_clients_run_on_their_cores_and_leave_no_process_behind(tmp_path: Path) -> None:
    """Clients run pinned together; a failing one ends the wait, and every group (the children
    each forked included) is gone afterwards, the long one's too."""

    runs = [
        ([sys.executable, "-c", CLIENT, seconds, code], tmp_path / f"c{i}.log")
        for i, (seconds, code) in enumerate([("0.2", "0"), ("2", "3"), ("60", "0")])
    ]
    assert pinned_clients(runs, (0,), dict(os.environ)) == [0, 3]  # the third not waited for
    for _, log in runs:
        cores, group = log.read_text().split("]")
        assert cores == "[0", log.read_text()
        assert_group_gone(int(group))


def test_clients_still_running_at_the_bound_are_ended_and_read_first(tmp_path: Path) -> None:
    """A bound on all the clients together: one that finished keeps its code, each still running
    gets None, the server is read (``when_cut``) before any is ended, and no group is left."""
    runs = [
        ([sys.executable, "-c", CLIENT, seconds, "0"], tmp_path / f"c{i}.log") for i, seconds in enumerate(["0.1", "60", "60"])
    ]
    read: list[bool] = []

    def when_cut() -> None:  # the clients are still there when the server is read
        read.append(all(log.read_text() for _, log in runs))

    assert pinned_clients(runs, (), dict(os.environ), within=3.0, when_cut=when_cut) == [0, None, None]
    assert read == [True]
    for _, log in runs:
        assert_group_gone(int(log.read_text().split("]")[1]))


def test_a_split_bench_that_outlives_its_arrivals_is_cut_with_the_engines_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The H100's 1.15 x bench (256 running, up to 476 queued) had not drained 22 s after its 300 s of
    arrivals when the call's clock cut it, and nothing was written: past ``within`` the parts are
    ended and the level is behind its arrivals, with what the engine held then."""
    parts = iter(["0", "60"])  # one part done, one still sending

    def argv(*args: object, **kwargs: object) -> list[str]:
        return [sys.executable, "-c", CLIENT, next(parts), "0"]

    monkeypatch.setattr(goodput_crosscheck, "bench_argv", argv)
    r = bench_split("http://127.0.0.1:1", "m", 8.0, 2, (1.0, 16, 4), tmp_path, within=3.0, count=lambda: 476)
    assert r == {"cut": {"after_s": 3.0, "parts_left": ["r8-p1"], "in_flight": 476}}
    said = behind(r["cut"], 1.0)
    assert said.startswith("behind its arrivals: 1 bench part(s) still running 2 s after its 1 s of arrivals, 476 requests")
    assert_group_gone(int((tmp_path / "bench-r8-p1.log").read_text().split("]")[1]))


def test_a_failed_part_is_an_error_also_when_another_is_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = iter([("60", "0"), ("0.1", "3")])

    def argv(*args: object, **kwargs: object) -> list[str]:
        return [sys.executable, "-c", CLIENT, *next(parts)]

    monkeypatch.setattr(goodput_crosscheck, "bench_argv", argv)
    with pytest.raises(RuntimeError, match=r"part r8-p1\) exited 3"):
        bench_split("http://127.0.0.1:1", "m", 8.0, 2, (1.0, 16, 4), tmp_path, within=2.0)


def test_an_answer_that_broke_its_confirmation_is_not_benched_unless_forced(tmp_path: Path) -> None:
    """The committed SGLang study whose confirmation broke at 48, 43.2 and 38.88 requests/s: the
    bench refuses to check its search answer (on the H100 it ran 1.15 x 48 for 5 minutes), with
    one line that names the study, before any server starts."""
    import shutil

    from goodput_crosscheck import main

    db = tmp_path / "study.db"
    shutil.copy(Path(__file__).resolve().parents[2] / "docs/data/goodput/h200-sglang-2026-12-04b/study.db", db)
    with pytest.raises(SystemExit) as refused:
        main(["--study", "h200-sglang-goodput-rate", "--storage", f"sqlite:///{db}", "--out", str(tmp_path / "out")])
    said = str(refused.value.code)
    assert "no load below it held" in said and "h200-sglang-goodput-rate" in said and "\n" not in said, said
    assert not (tmp_path / "out" / "server.log").exists()


def test_a_load_named_by_at_is_compared_with_the_confirmation_run_there() -> None:
    """``--at`` benches a step the confirmation ran (the H100's 38.88 requests/s, 7 minutes, one slice
    over the TTFT target): the tool's figure beside the bench is that run's goodput, not the
    search's answer's; a load no run measured gives no ratio."""
    import json
    import sqlite3

    from goodput_crosscheck import confirmation_at

    db = Path(__file__).resolve().parents[2] / "docs/data/goodput/h100-sglang-2026-12-06b/study.db"
    with sqlite3.connect(db) as c:
        (stored,) = c.execute("select value_json from study_user_attributes where key = 'confirmed.0'").fetchone()
    confirmed = json.loads(stored)
    figure, said = confirmation_at(confirmed, 38.88)
    assert figure is not None and round(figure[0], 1) == 4924.8 and round(figure[1], 1) == 105.3, figure
    assert "420 s did NOT hold" in said, said
    assert confirmation_at(confirmed, 40.0) == (None, "no confirmation run at that load (no ratio)")


def test_the_bench_says_whether_the_tune_ran_on_its_host() -> None:
    """On the H100 (2026-12-06) the bench held 1.15 x an answer searched on another host, which ran
    the same load 2 x slower, and its output compared them as if on one: it now says which."""
    from goodput_crosscheck import _tune_host

    from tuner.host.fingerprint import HostFingerprint, apart

    searched = HostFingerprint("gpu-a", "Intel(R) Xeon(R) Platinum 8480+", 16, ("NVIDIA H100 80GB HBM3",), "570.86", 24.0)
    here = HostFingerprint(**{**searched.to_dict(), "name": "gpu-b", "loop_ms": 11.5})
    assert _tune_host(searched, apart(searched, searched)) == "the tune ran on this host"
    said = _tune_host(searched, apart(searched, here))
    assert said.startswith("the tune ran on another host (host gpu-a vs gpu-b; a core's Python speed 24.0 vs 11.5 ms")
    assert "unknown" in _tune_host(None, None)


def test_an_answer_its_confirmation_corrected_is_benched_at_the_corrected_load() -> None:
    """The committed H200 study whose confirmation broke at 48 requests/s and held 34.99 a step
    below: status, export and the pick size on 34.99, and the bench checked 48 unless told --at. It
    now benches the corrected load by default, beside the tool's 7-minute run there; an answer that
    held is benched with the search's own goodput."""
    import json
    import sqlite3

    from goodput_crosscheck import load_to_bench

    db = Path(__file__).resolve().parents[2] / "docs/data/goodput/h200-sglang-2026-12-05/study.db"
    with sqlite3.connect(db) as c:
        (stored,) = c.execute("select value_json from study_user_attributes where key = 'confirmed.0'").fetchone()
    confirmed = json.loads(stored)
    metrics = {"slo.rate": 48.0, "slo.goodput": 6000.0, "slo.goodput_ci": 100.0}
    load, figure, said = load_to_bench(metrics, confirmed, True, None)
    kept = next(r for r in confirmed["runs"] if r["held"])
    assert load == confirmed["confirmed_answer"]["rate"] == kept["at"], (load, confirmed["confirmed_answer"])
    assert figure == (kept["goodput"], kept["goodput_ci"]), figure
    assert "corrected 48 to" in said and "held" in said, said
    held = {**confirmed, "held": True, "confirmed_answer": {"rate": 48.0}}
    assert load_to_bench(metrics, held, True, None)[:2] == (48.0, (6000.0, 100.0))
    assert load_to_bench(metrics, confirmed, True, 40.0)[:2] == (40.0, None)


def test_a_bench_run_is_judged_by_its_minutes_as_the_confirmation_is() -> None:
    """vLLM on the H100 (2026-12-07): 50.4/s for 7 minutes held over the whole run (TTFT p99 0.89 s)
    and broke in 3 of its minutes, where its KV pool filled. Two parts at 2/s each over 180 s, the
    second minute's requests of one part slow: the whole run's p99 holds, that minute does not."""
    slo = SloTargets(ttft_p99=1.0, itl_p99=0.05)
    starts = [1000.0 + i * 0.5 for i in range(360)]  # perf_counter seconds, one clock for both parts
    a, b = _part(starts, ttft=0.2), _part([t + 0.25 for t in starts], ttft=0.2)
    a["ttfts"] = [1.5 if 60 <= t - 1000.0 < 63 else 0.2 for t in starts]  # 6 of the 240 requests in minute 2
    whole = merge([a, b], 4.0)
    assert whole["p99_ttft_ms"] < 1000.0
    by_minute = minutes([a, b], 4.0, 180.0)
    assert by_minute["timed_by"] == "send times" and [s["requests"] for s in by_minute["slices"]] == [240, 240, 240]
    assert judged_minutes(slo, by_minute) == ["minute 2: ttft_p99 1.5 > 1"]
    assert by_minute["slices"][1]["broke"] == ["ttft_p99 1.5 > 1"] and "broke" not in by_minute["slices"][0]
    assert throughout(by_minute, judged_minutes(slo, by_minute)).startswith("broke in 1 of its 3 minutes (minute 2:")
    a["ttfts"] = [0.2] * len(starts)
    assert judged_minutes(slo, minutes([a, b], 4.0, 180.0)) == []


def test_without_send_times_a_request_s_minute_is_its_place_in_the_schedule() -> None:
    """SGLang's bench keeps no send times: part p's i-th request at i x K / R; sends past the last
    whole minute count in it; failed requests count in their minute's error rate."""
    parts = [_part([0.0] * 250, ttft=0.2, failed=2) for _ in range(2)]  # 2 parts at 2/s: 250 each over 125 s
    for p in parts:
        del p["start_times"]
    by_minute = minutes(parts, 4.0, 125.0)
    assert by_minute["timed_by"].startswith("request order")
    assert [s["requests"] for s in by_minute["slices"]] == [240, 260]  # 120 a part a minute, the 5 s past the end in the last
    assert by_minute["slices"][0]["error_rate"] == pytest.approx(4 / 240) and by_minute["slices"][1]["error_rate"] == 0.0
    assert judged_minutes(SloTargets(ttft_p99=1.0), by_minute) == ["minute 1: error_rate 0.0167 > 0"]
    assert by_minute["slices"][0]["tpot_p99"] == pytest.approx(0.015)
