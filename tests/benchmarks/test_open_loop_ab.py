"""The open-loop A/B: arms interleaved on one real llama-server, each a sender plan or a request body."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from open_loop_ab import Variant, main, variants


def test_arms_are_the_two_plans_or_the_bodies_from_every_core() -> None:
    assert variants(4, None) == [Variant(1), Variant(4)]
    assert variants(1, None) == [Variant(1)]
    assert variants(0, None) == [Variant(1)]
    bodies = variants(4, [{}, {"min_tokens": 8}])
    assert bodies == [Variant(4, {}), Variant(4, {"min_tokens": 8})]
    assert [b.label for b in bodies] == ["request {}", 'request {"min_tokens": 8}']


def test_a_request_field_the_probe_owns_is_refused_before_a_server_starts(real_study, tmp_path: Path) -> None:
    study, run_dir, _ = real_study
    with pytest.raises(Exception, match="max_tokens, which the probe owns"):
        main(["--study", study.study_name, "--storage", run_dir.db_url, "--out", str(tmp_path), "--request", '{"max_tokens": 3}'])
    assert not (tmp_path / "server").exists()


@pytest.mark.integration
@pytest.mark.one_core
def test_two_request_bodies_interleaved_on_one_real_server(real_study, tmp_path: Path) -> None:
    """Two arms (the space's body, and one with a sampling field over it), a round each at 2
    requests/s: each level delivered its schedule by the probe's own verdict (not client-bound:
    in 3 s of ~6 arrivals one sent a moment late is 83 %, within a count's spread) with outputs of
    the asked length, the rows say which body they sent, and the summary has a line per arm."""
    study, run_dir, _ = real_study
    main([
        "--study", study.study_name, "--storage", run_dir.db_url, "--out", str(tmp_path), "--rate", "2", "--seconds", "3",
        "--repeats", "1", "--request", "{}", "--request", '{"temperature": 0.8, "top_k": 5}',
    ])  # fmt: skip
    found = json.loads((tmp_path / "open-loop-ab.json").read_text())
    rows = found["rows"]
    assert [r["request"] for r in rows] == [{}, {"temperature": 0.8, "top_k": 5}]
    for row in rows:
        assert row["client_bound"] is False and row["achieved_over_offered"] > 0 and row["short_outputs"] == 0, row
    labels = ["request {}", 'request {"temperature": 0.8, "top_k": 5}']
    assert [r["arm"] for r in rows] == labels
    assert all(line.startswith(f"{label}, ") for line, label in zip(found["summary"], labels, strict=True))
    assert (tmp_path / "server" / "server.log").is_file()


def _decode(at: str, running: int, rate: float, queued: int = 0) -> str:
    """One of SGLang 0.5.17's Decode batch lines, as on the H100."""
    return (
        f"[2026-12-06 {at}] Decode batch, #running-req: {running}, #token: 11663, token usage: 0.02, cuda graph: True, "
        f"gen throughput (token/s): {rate:.2f}, #queue-req: {queued}"
    )


SGLANG_LOG = [
    "[2026-12-06 08:35:09] Prefill batch, #new-seq: 4, #new-token: 2048, #cached-token: 0, #queue-req: 0",
    _decode("08:35:09", 1, 0.0),
    _decode("08:35:10", 20, 5000.0),
    _decode("08:35:40", 30, 6000.0, queued=2),
    _decode("08:35:41", 10, 5000.0),
    _decode("08:36:30", 12, 6000.0),
]


def test_the_engine_s_own_view_of_each_level_from_sglang_s_log() -> None:
    """SGLang's Decode batch lines (0.5.17's format, as on the H100): the step's time is requests
    running over the generation throughput; each level gets the lines inside its wall-clock span."""
    from open_loop_ab import engine_view

    from tuner.engines.sglang import decode_steps

    steps = decode_steps(SGLANG_LOG)
    assert [(s.running, s.queued, s.step_ms) for s in steps] == [
        (1, 0, None),
        (20, 0, 4.0),
        (30, 2, 5.0),
        (10, 0, 2.0),
        (12, 0, 2.0),
    ]
    rows = [{"wall": ["2026-12-06T08:35:10", "2026-12-06T08:35:40"]}, {"wall": ["2026-12-06T08:35:41", "2026-12-06T08:36:40"]}]
    rows.append({"wall": ["2026-12-06T09:00:00", "2026-12-06T09:01:00"]})  # no line inside: nothing said
    engine_view(rows, steps)
    assert (rows[0]["engine_running_mean"], rows[0]["engine_step_ms"]) == (25.0, 4.5)
    assert (rows[1]["engine_running_mean"], rows[1]["engine_step_ms"]) == (11.0, 2.0)
    assert rows[2]["engine_running_mean"] is None and rows[2]["engine_step_ms"] is None
