"""Where a confirmation's requests in the system pass what its server's KV pool holds, status
says so per run, and that the pool is the knob. vLLM on the H100 (2026-12-07) at 0.03 of its
memory: 82,368 tokens, 128 requests of 640; its 56/s and 50.4/s runs passed it in every minute and
broke 1 and 3 of them with a queue that did not grow (docs/goodput.md, fifteenth session). The
committed study is the one used here."""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import ROOT, tune_here
from tuner.app.read import stored_space
from tuner.base.records import Capacity
from tuner.results.confirmation import describe, hold_past_kv_pool, kv_pool, past_kv_pool
from tuner.trials import read_study
from tuner.workload.spec import WorkloadSpec

NAME = "h200-vllm-goodput-rate"
DB = ROOT / "docs/data/goodput/h100-vllm-2026-12-07/study.db"


def _study() -> optuna.Study:
    return optuna.load_study(study_name=NAME, storage=f"sqlite:///{DB}")


def test_each_run_past_the_kv_pool_says_in_how_many_minutes_and_how_many_broke() -> None:
    trial = read_study(_study()).trials[0]
    found = {**trial.confirmed, "kv_pool": {"tokens": 82368, "per_request": 640, "requests": 128}}
    lines = past_kv_pool(found)
    assert len(lines) == 2, lines
    first = "  at 56 requests/s: requests in the system passed the 128 that the KV pool holds (82,368 tokens, 640 a request)"
    assert lines[0].startswith(first + " in 6 of 6 minutes, up to 245; 1 of those broke the SLO"), lines[0]
    assert "at 50.4 requests/s" in lines[1] and "in 7 of 7 minutes, up to 205; 3 of those broke" in lines[1], lines[1]
    assert "memory fraction" in lines[1] and set(lines) <= set(describe(found, 0))
    assert past_kv_pool({**found, "kv_pool": {"tokens": 10**6, "per_request": 640, "requests": 1562}}) == []  # never passed
    assert past_kv_pool(dict(trial.confirmed)) == []  # stored before the pool was: no line
    said = describe(dict(trial.confirmed), 0)[-1]  # and where the steps left it, with the command that goes on
    assert said.endswith("the search's 56 requests/s is no answer to size on (tune validate --confirm --resume goes on "
                         "a step below 50.4 requests/s)"), said  # fmt: skip


def test_the_pool_is_counted_in_requests_of_the_load_s_one_shape_only() -> None:
    study = _study()
    space, trial = stored_space(study), read_study(study).trials[0]
    assert trial.capacity.get("kv_tokens") == 80096  # the search's server; the confirmation's own count comes first
    from_search = kv_pool(space, trial, None)
    assert from_search == {"tokens": 80096, "per_request": 640, "requests": 125}
    outcome = type("Outcome", (), {"capacity": Capacity(kv_tokens=82368)})()
    assert kv_pool(space, trial, outcome) == {"tokens": 82368, "per_request": 640, "requests": 128}  # type: ignore[arg-type]
    load = space.probes.load
    assert load is not None
    shared = space.model_copy(
        update={"probes": space.probes.model_copy(update={"load": load.model_copy(update={"prefix_tokens": 256})})}
    )
    assert kv_pool(shared, trial, None) is None  # a shared prefix: the pool holds more than tokens / size
    chat = WorkloadSpec.model_validate(yaml.safe_load((ROOT / "workloads/chat.yaml").read_text()))
    assert kv_pool(space.model_copy(update={"workload": chat}), trial, None) is None  # lengths drawn: no one size
    assert kv_pool(space, replace(trial, capacity={}), None) is None  # the engine said no size


def test_before_any_long_run_status_says_the_answer_s_hold_passed_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The search's hold at 56/s had up to 161 requests in the system against the 125 its trial's
    pool held, and held 100 s; its confirmation broke in its sixth minute. Before that run, status
    (and the end of `tune run`) says so under the pick; once a confirmation is stored, it speaks."""
    study = _study()
    trial = read_study(study).trials[0]
    line = hold_past_kv_pool(trial, kv_pool(stored_space(study), trial))
    assert line == (
        "its hold at 56 had up to 161 requests in the system, past the 125 the KV pool holds (80,096 tokens, 640 a request): "
        "a burst that fills it breaks a minute that a 100-s hold may not see; a long run tells (tune validate --confirm)"
    ), line
    assert hold_past_kv_pool(trial, {"tokens": 200_000, "per_request": 640, "requests": 312}) is None
    assert hold_past_kv_pool(trial, None) is None
    db = tmp_path / "study.db"
    shutil.copy(DB, db)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM study_user_attributes WHERE key = 'confirmed.0'")
    assert tune_here("status", "--study", NAME, "--storage", f"sqlite:///{db}") == 0
    out = capsys.readouterr().out
    assert "not confirmed by a long run" in out and f"  note: {line}" in out, out
    assert tune_here("status", "--study", NAME, "--storage", f"sqlite:///{DB}") == 0
    assert "note: its hold" not in capsys.readouterr().out  # the confirmation says what happened instead
