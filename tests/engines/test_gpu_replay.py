"""Offline replay of the real H200 tunes (vLLM 0.26, SGLang 0.5.17; device tool, 2026-11-29):
their studies, server logs and evidence, committed under tests/fixtures/gpu/."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from optuna.trial import TrialState

from tests.conftest import FIXTURES
from tests.gpu.checks import check_tune, load
from tuner import engines
from tuner.export import build_export
from tuner.pick import pick
from tuner.space import SearchSpace

GPU = FIXTURES / "gpu"


@pytest.fixture()
def copy(tmp_path: Path):
    def make(name: str) -> Path:
        shutil.copytree(GPU / name, tmp_path / name)
        return tmp_path / name

    return make


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_real_tune_replays(engine: str, copy) -> None:
    check_tune(copy(f"h200-{engine}"), f"h200-{engine}", engine)


def _log(engine: str, trial: int) -> str:
    return (GPU / f"h200-{engine}" / "trials" / str(trial) / "server.log").read_text()


def test_vllm_real_failures_and_grade() -> None:
    vllm = engines.get("vllm")
    assert vllm.classify(_log("vllm", 1)).signature.name == "no_kv_cache_memory"
    graded = vllm.classify(_log("vllm", 2))
    assert graded.signature.name == "max_model_len_exceeds_kv"
    assert graded.details["asked_max_model_len"] == 2000000
    assert 0 < graded.details["estimated_max_model_len"] < 2000000
    assert vllm.classify(_log("vllm", 0)) is None


def test_vllm_real_capacity_lines() -> None:
    cap = engines.get("vllm").capacity(_log("vllm", 0), None, None)
    assert (cap.kv_tokens, cap.context_per_request) == (909040, 8192)
    assert cap.sources["log"]["max_concurrency_at_context"] == pytest.approx(110.97)


def test_sglang_real_failure_capacity_and_starved_config(copy) -> None:
    sglang = engines.get("sglang")
    failure = sglang.classify(_log("sglang", 2))
    assert failure.signature.name == "context_above_derived"
    assert failure.details == {"asked_context_length": 2000000, "derived_context_length": 8192}
    cap = sglang.capacity(_log("sglang", 0), None, None)
    assert (cap.kv_tokens, cap.max_running_requests, cap.context_per_request) == (855873, 256, 8192)
    study = load(copy("h200-sglang"), "h200-sglang")
    starved = study.trials[1]
    assert starved.params["mem-fraction-static"] == 0.105 and starved.state == TrialState.COMPLETE
    assert starved.user_attrs["capacity"]["kv_tokens"] == 6368
    assert starved.constraints["load.ttft_p99 <= 5"] > 0  # starts, but is not a success
    assert starved.number not in [t.number for t in study.best_trials]


def test_both_sources_agree_on_real_runs(copy) -> None:
    for engine in ("vllm", "sglang"):
        study = load(copy(f"h200-{engine}"), f"h200-{engine}")
        for t in study.trials:
            if t.state == TrialState.COMPLETE:
                assert t.user_attrs["capacity"]["disagreements"] == [], (engine, t.number)


def test_export_of_the_real_sglang_winner(copy) -> None:
    study = load(copy("h200-sglang"), "h200-sglang")
    space = SearchSpace.model_validate(study.user_attrs["tuner.space"])
    exported = build_export(study, space, pick(study, "max-throughput"))
    unit = exported.render("systemd")
    assert "--mem-fraction-static 0.85" in unit and "KillMode=control-group" in unit
    assert "KV pool tokens          855,873" in unit


def _rel_log(engine: str, trial: int) -> str:
    import gzip

    return gzip.decompress((GPU / f"rel-{engine}" / "trials" / str(trial) / "server.log.gz").read_bytes()).decode()


def _generic_only(engine: str) -> list:
    from tuner.engines import Category

    return [s for s in engines.get(engine).signatures if s.category == Category.CRASH]


def test_real_sglang_failure_that_no_signature_knows_is_named_by_its_exception() -> None:
    """SGLang 0.5.17 at --mem-fraction-static 0.05 on the H200 (scripts/h200-reliability.sh):
    once 'Scheduler hit an exception' and 'child_failed', now the raised ValueError and its numbers."""
    from tuner.driver import grade

    match = engines.get("sglang").classify(_rel_log("sglang", 1))
    assert match.signature.name == "raised_kv_cache_does_not_fit"
    assert match.lines[0].text.startswith("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.05")
    assert (match.details["asked"], match.details["viable"]) == (0.05, 0.1)
    assert grade(match.details) == pytest.approx(1.0)


def test_real_vllm_failure_reworded_is_named_by_its_root_cause() -> None:
    """The real vLLM 0.26 log of a utilization too small, classified as if vLLM had reworded it:
    the engine core's ValueError heads it, not the API server's 'Engine core initialization failed'."""
    from tuner.engines._signatures import classify

    match = classify(_generic_only("vllm"), _rel_log("vllm", 1))
    assert match.signature.name == "raised_kv_cache_does_not_fit"
    assert "ValueError: No available memory for the cache blocks" in match.lines[0].text


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_real_engine_killed_mid_probe_was_pruned_with_evidence(engine: str) -> None:
    """The engine child SIGKILLed mid-probe on the H200: PRUNED, the first failed request, when."""
    import json

    import optuna

    study = optuna.load_study(study_name=f"rel-{engine}", storage=f"sqlite:///{GPU / f'rel-{engine}' / 'study.db'}")
    crashed = study.trials[2]
    assert crashed.state == TrialState.PRUNED
    evidence = json.loads((GPU / f"rel-{engine}" / "trials" / "2" / "evidence.json").read_text())
    details = evidence["details"]
    assert details["probe"] == "load" and details["concurrency"] == 64 and details["fatal"] is True
    assert details["stopped_by_tuner"] is False and 0 < details["exited_after_s"] < 30
    assert details["first_error"]
    assert study.trials[0].state == TrialState.FAIL and "interrupted" in study.trials[0].user_attrs["error"]
