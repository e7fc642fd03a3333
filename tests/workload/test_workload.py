"""Workloads (issue 46): distributions whose draws have the moments they state, traces read with
one error per bad line naming the file and the line, a trace replayed at its own pace scaled to a
rate, sessions that resend their history; on a real llama-server a trace with known reuse is sent
with the lengths it asks (by the server's count) and served from the cache as its hash_ids allow."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.workload import Dist, TraceError, Workload, WorkloadSpec, draw, read_trace, reusable, trace_stats


@pytest.mark.parametrize(
    ("dist", "mean", "sd"),
    [
        (Dist(uniform=(100, 300)), 200.0, math.sqrt((201**2 - 1) / 12)),
        (Dist.model_validate({"normal": {"mean": 500, "sd": 50}, "min": 1}), 500.0, 50.0),
        (Dist.model_validate({"lognormal": {"mean": 2000, "sd": 1500}}), 2000.0, 1500.0),
        (Dist(empirical=[10, 20, 60]), 30.0, math.sqrt(((20**2) + 10**2 + 30**2) / 3)),
    ],
)
def test_draws_have_the_moments_their_distribution_states(dist: Dist, mean: float, sd: float) -> None:
    rng = random.Random(7)
    values = [draw(dist, rng) for _ in range(20_000)]
    half = 1.96 * sd / math.sqrt(len(values))  # the mean's 95 % interval
    assert abs(statistics.fmean(values) - mean) < 2 * half, (statistics.fmean(values), mean, half)
    assert abs(statistics.pstdev(values) / sd - 1) < 0.1


def test_bounds_hold_and_a_length_under_one_token_is_refused() -> None:
    rng = random.Random(1)
    bounded = Dist.model_validate({"normal": {"mean": 100, "sd": 80}, "min": 50, "max": 120})
    assert all(50 <= draw(bounded, rng) <= 120 for _ in range(2000))
    with pytest.raises(ValueError, match="at least 1 token"):
        WorkloadSpec.model_validate({"prompt": 0, "output": 10})
    with pytest.raises(ValueError, match="exactly one of"):
        Dist.model_validate({"fixed": 3, "uniform": [1, 2]})


def _trace(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"timestamp": 5, "input_length": 10, "output_length": 4}, "no 'hash_ids'"),
        ({"timestamp": 5, "input_length": 0, "output_length": 4, "hash_ids": []}, "input_length 0 is not a positive"),
        ({"timestamp": -1, "input_length": 8, "output_length": 4, "hash_ids": []}, "timestamp -1"),
        ({"timestamp": 1, "input_length": 8, "output_length": 4, "hash_ids": [1]}, "before the previous line's 2"),
        ({"timestamp": 9, "input_length": 8, "output_length": 4, "hash_ids": [1, 2, 3]}, "more blocks"),
    ],
)
def test_a_bad_trace_line_is_one_error_naming_the_file_and_the_line(tmp_path: Path, line: dict, message: str) -> None:
    good = {"timestamp": 2, "input_length": 8, "output_length": 4, "hash_ids": [1]}
    path = _trace(tmp_path / "t.jsonl", [good, line])
    with pytest.raises(TraceError, match=message) as found:
        read_trace(path, block=4)
    assert str(found.value).startswith(f"{path}:2: ") and "\n" not in str(found.value)


def test_an_empty_trace_is_refused(tmp_path: Path) -> None:
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(TraceError, match="empty"):
        read_trace(tmp_path / "e.jsonl")


def test_reuse_is_the_leading_blocks_an_earlier_request_sent(tmp_path: Path) -> None:
    rows = read_trace(
        _trace(
            tmp_path / "r.jsonl",
            [
                {"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1, 2, 3]},
                {"timestamp": 10, "input_length": 12, "output_length": 2, "hash_ids": [1, 2, 4]},
                {"timestamp": 20, "input_length": 8, "output_length": 2, "hash_ids": [5, 2]},  # new first block: no reuse
            ],
        ),
        block=4,
    )
    assert reusable(rows, block=4) == [0, 8, 0]
    stats = trace_stats(rows, block=4)
    assert stats["requests"] == 3 and stats["rate"] == pytest.approx(100.0) and stats["reusable_share"] == pytest.approx(8 / 30)


def test_a_trace_replays_its_own_pace_scaled_to_the_rate_and_its_blocks_are_shared_text(tmp_path: Path) -> None:
    stamps = [0, 100, 150, 400, 1000]  # ms: a trace's own rate 4 per second
    path = _trace(
        tmp_path / "p.jsonl",
        [{"timestamp": t, "input_length": 700, "output_length": 5, "hash_ids": [1, 10 + i]} for i, t in enumerate(stamps)],
    )
    work = Workload(WorkloadSpec.model_validate({"trace": str(path)}))
    at = list(itertools.islice(work.arrivals(8.0, seed=0), 10))  # twice the trace's pace
    assert at[:5] == pytest.approx([t / 2000 for t in stamps])
    assert at[5] == pytest.approx((1000 + 250) / 2000)  # the next pass, a mean gap later
    first, second = work.session(0).turns[0], work.session(1).turns[0]
    assert first.prompt_tokens == 700 and first.segments[0] == second.segments[0]  # block 1: the same text
    assert first.segments[1].tokens == 188 and first.segments[1] != second.segments[1]
    assert work.session(5).turns[0].segments[0].id != first.segments[0].id  # a second pass: its own ids


def test_a_sessions_turn_resends_its_history_and_adds_the_users_new_tokens() -> None:
    work = Workload(WorkloadSpec.model_validate({"turns": 4, "user": 30, "output": 7, "think": 0.5, "system": 20}))
    one, other = work.session(0), work.session(1)
    assert [t.prompt_tokens for t in one.turns] == [50, 87, 124, 161]
    assert [t.think_s for t in one.turns] == [0.0, 0.5, 0.5, 0.5]
    for a, b in itertools.pairwise(one.turns):
        assert b.segments[: len(a.segments)] == a.segments  # the last prompt, then its answer and new text
    assert one.turns[0].segments[0] == other.turns[0].segments[0] and one.turns[0].segments[1] != other.turns[0].segments[1]


@pytest.mark.integration
def test_a_trace_with_known_reuse_is_sent_exactly_and_served_from_the_cache_as_it_allows(
    tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """A trace of 60 requests in chains of three (each request's leading blocks are the one
    before it's), closed loop, one client on one slot: every prompt and output is the length the
    trace asks by the server's count, and the cache serves what the hash_ids allow, within 5 points."""
    from tests.conftest import handle, llama_server_process
    from tuner.probes import LoadProbe
    from tuner.space import LoadProbeSpec

    rows = []
    for i in range(60):
        chain, k = divmod(i, 3)
        rows.append({"timestamp": 100 * i, "input_length": 32 * (k + 1) + 10, "output_length": 4 + k,
                     "hash_ids": [1000 * chain + j for j in range(k + 2)]})  # fmt: skip
    path = _trace(tmp_path / "chains.jsonl", rows)
    workload = WorkloadSpec.model_validate({"trace": str(path), "block": 32})
    # 12 s: 14 requests of twice these lengths took 8 s here alone, 7 in CI beside other tests (ci50)
    spec = LoadProbeSpec(concurrency=[1], duration=12, max_duration=14, warmup=1, workload=workload)
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 1}) as server:
        server.wait_ready()
        level = LoadProbe(spec).run(replace(handle(server))).details["levels"]["1"]
    assert level["requests"] >= 9 and level["errors"] == 0, level  # three chains at least
    assert level["prompt_tokens_exact"] == 1.0, level
    assert level["output_tokens_over_asked"] == pytest.approx(1.0, abs=0.01), level
    assert level["cache_hit_allowed"] > 0.3, level
    assert level["cache_hit_rate"] == pytest.approx(level["cache_hit_allowed"], abs=0.05), level


def test_a_space_states_its_workload_by_file_and_a_bad_trace_is_one_line_naming_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped workloads load (a relative trace found beside its workload file, made absolute
    and fingerprinted); the load probe sends the space's workload; a trace line without a field
    stops `tune run` before anything starts, in one line naming the file and the line."""
    import shutil

    import yaml

    from tests.conftest import ROOT, tiny_space, tune_here
    from tuner.app.prepare import validate

    for name in ("chat", "agent-sessions", "agent-trace"):
        space = validate({**tiny_space(), "workload": str(ROOT / "workloads" / f"{name}.yaml")}, "s.yaml")
        assert isinstance(space.workload, WorkloadSpec) and space.load_spec().workload == space.workload  # type: ignore[union-attr]
    traced = space.workload.classes[0]  # type: ignore[union-attr]
    assert Path(traced.trace).is_absolute() and len(traced.sha256) == 64
    shutil.copy(ROOT / "workloads/traces/agent-sample.jsonl", tmp_path / "t.jsonl")
    with (tmp_path / "t.jsonl").open("a") as f:
        f.write('{"timestamp": 999999999, "input_length": 10, "output_length": 3}\n')
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**tiny_space(), "workload": {"trace": "t.jsonl"}}))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert tune_here("run", "--space", "s.yaml", "--study", "bad", "--dry-run") == 2
    said = capsys.readouterr()
    assert "t.jsonl:158: no 'hash_ids'" in said.out + said.err and len((said.out + said.err).strip().splitlines()) == 1, said
    assert not (tmp_path / "runs" / "bad").exists()


def test_tune_workload_stats_prints_what_a_trace_holds(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.conftest import ROOT, tune_here

    assert tune_here("workload", "stats", str(ROOT / "workloads/traces/agent-sample.jsonl")) == 0
    out = capsys.readouterr().out
    assert "157 requests over 200.1 s" in out and "reuse: 78.9% of 527,797 prompt tokens" in out, out
