"""Checks of a real H200 tune's results, shared by the gpu tests (on the device, over the run it
just made) and the offline tests (over the trimmed copy committed under tests/fixtures/gpu/)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.trial import TrialState

FAILURES = {"vllm": {"no_kv_cache_memory", "max_model_len_exceeds_kv"}, "sglang": {"context_above_derived", "not_enough_memory"}}
ENDPOINTS = {"vllm": "/metrics", "sglang": "/server_info"}


def load(run_dir: Path, study: str) -> optuna.Study:
    return optuna.load_study(study_name=study, storage=f"sqlite:///{run_dir / 'study.db'}")


def check_tune(run_dir: Path, study: str, engine: str) -> None:
    trials = load(run_dir, study).get_trials()
    finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(finished) >= 4, [t.state for t in trials]
    pruned = [t for t in trials if t.state == TrialState.PRUNED and "invalid_combination" not in t.user_attrs]
    assert pruned and {t.user_attrs.get("signature") for t in pruned} & FAILURES[engine]
    for t in pruned:
        evidence = json.loads((run_dir / "trials" / str(t.number) / "evidence.json").read_text())
        assert evidence["lines"]
        assert evidence["returncode"] is not None or evidence["details"]["stopped_by_tuner"]
        assert (run_dir / "trials" / str(t.number) / "server.log").stat().st_size > 0
    served = [t for t in trials if t.state == TrialState.COMPLETE]
    assert served
    for t in served:
        metrics = t.user_attrs["metrics"]
        assert metrics["load.output_tok_s@32"] > 0 and metrics["load.output_tok_s@128"] > 0
        capacity = t.user_attrs["capacity"]
        assert {"log", ENDPOINTS[engine]} <= set(capacity["sources"]), capacity["sources"].keys()
        assert capacity["kv_tokens"] > 0
        assert t.user_attrs["timings"]["startup_s"] > 0
