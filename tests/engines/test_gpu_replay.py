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
from tuner.results.export import build_export
from tuner.results.pick import pick
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
    assert failure.details == {
        "asked_context_length": 2000000,
        "derived_context_length": 8192,
        engines.DISTANCE: 2000000 / 8192 - 1,
    }
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
    from tuner.trials import grade

    match = engines.get("sglang").classify(_rel_log("sglang", 1))
    assert match.signature.name == "raised_kv_cache_does_not_fit"
    assert match.lines[0].text.startswith(
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.05"
    )
    assert (match.details["asked"], match.details["viable"]) == (0.05, 0.1)
    assert grade(match.details) == pytest.approx(1.0)


def test_real_vllm_failure_reworded_is_named_by_its_root_cause() -> None:
    """The real vLLM 0.26 log of a utilization too small, classified as if vLLM had reworded it:
    the engine core's ValueError heads it, not the API server's 'Engine core initialization failed'."""
    from tuner.engines import classify

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


def test_real_h200_tune_has_power_and_energy_per_level(tmp_path: Path) -> None:
    """scripts/h200-telemetry.sh (vLLM 0.26, NVML): every trial has power and energy per load
    level; tokens per joule is the window's output tokens over its energy; the report shows them."""
    import optuna

    from tuner.results.report import build_report

    shutil.copytree(GPU / "h200-energy", tmp_path / "e")
    study = optuna.load_study(study_name="h200-energy", storage=f"sqlite:///{tmp_path / 'e' / 'study.db'}")
    for t in study.trials:
        m = t.user_attrs["metrics"]
        assert t.user_attrs["telemetry"]["source"] == "nvml" and len(t.user_attrs["telemetry"]["trace"]) > 50
        for level in (32, 128):
            assert m[f"telemetry.power_w@{level}"] > 100 and m[f"telemetry.samples@{level}"] >= 50
            tokens = m[f"load.output_tok_s@{level}"] * m[f"load.window_s@{level}"]
            assert m[f"telemetry.tokens_per_joule@{level}"] == pytest.approx(tokens / m[f"telemetry.energy_j@{level}"], rel=0.02)
        assert m["telemetry.tokens_per_joule"] == m["telemetry.tokens_per_joule@128"]  # the target level
    runs = [r[1] for r in study.user_attrs["revalidated.0"]["runs"]] + [study.user_attrs["noise"]["runs"][-1][1]]
    assert len(runs) == 3 and (max(runs) - min(runs)) / (sum(runs) / 3) < 0.05  # tokens/J on 3 fresh servers
    report = build_report(study, SearchSpace.model_validate(study.user_attrs["tuner.space"]))
    assert "## Power and energy" in report.markdown and "Power per trial" in report.html
