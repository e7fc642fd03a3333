"""Where a confirmation's requests in the system pass what its server's KV pool holds, status
says so per run, and that the pool is the knob. vLLM on the H100 (2026-12-07) at 0.03 of its
memory: 82,368 tokens, 128 requests of 640; its 56/s and 50.4/s runs passed it in every minute and
broke 1 and 3 of them with a queue that did not grow (docs/goodput.md, fifteenth session). The
committed study is the one used here."""

from __future__ import annotations

from dataclasses import replace

import optuna
import yaml

from tests.conftest import ROOT
from tuner.app.read import stored_space
from tuner.base.records import Capacity
from tuner.orchestration.confirm import kv_pool
from tuner.results.confirmation import describe, past_kv_pool
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
