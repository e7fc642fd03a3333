"""The pre-screen: predictions from a study's own history, checked against real runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tests.conftest import FIXTURES
from tuner.screen import LlamaCppScreen, screen_for

D = {"ctx-size": CategoricalDistribution([2048, 8192, 16384, 32768, 65536]), "cache-type-k": CategoricalDistribution(["f16", "q8_0", "q4_0"]), "cache-type-v": CategoricalDistribution(["f16", "q8_0", "q4_0"])}


def _trial(params: dict, started: bool) -> optuna.trial.FrozenTrial:
    if started:
        return create_trial(params=params, distributions=D, values=[1.0, 1.0])
    return create_trial(params=params, distributions=D, state=TrialState.PRUNED, user_attrs={"signature": "kv_cache_oom"})


def test_llamacpp_needs_at_least_a_failure_fails() -> None:
    screen = LlamaCppScreen()
    screen.fit([
        _trial({"ctx-size": 65536, "cache-type-k": "f16", "cache-type-v": "f16"}, started=False),
        _trial({"ctx-size": 8192, "cache-type-k": "f16", "cache-type-v": "f16"}, started=True),
    ])
    same = screen.predict({"ctx-size": 65536, "cache-type-k": "f16", "cache-type-v": "f16"})
    assert same is not None and same.signature == "kv_cache_oom" and same.numbers["kv_bytes"] >= same.numbers["smallest_failed_kv_bytes"]
    # a quantized cache needs less: between a success and the failure -> launch, never a guess
    assert screen.predict({"ctx-size": 65536, "cache-type-k": "q4_0", "cache-type-v": "q4_0"}) is None
    assert screen.predict({"ctx-size": 16384, "cache-type-k": "f16", "cache-type-v": "f16"}) is None


def test_llamacpp_tied_v_type_is_seen(tmp_path) -> None:
    """With V tied to K, a q4_0 config needs q4_0 for both: never mistaken for f16 V."""
    from tests.conftest import tiny_space
    from tuner.space import validate

    raw = tiny_space()
    raw["parameters"] = {"ctx-size": {"type": "categorical", "choices": [8192, 65536]}, "cache-type-k": {"type": "categorical", "choices": ["f16", "q4_0"]}}
    raw["tied"] = {"cache-type-v": "cache-type-k"}
    space = validate(raw, "t.yaml")
    screen = LlamaCppScreen()
    failed = create_trial(params={"ctx-size": 65536, "cache-type-k": "f16"}, distributions={k: D[k] for k in ("ctx-size", "cache-type-k")},
                          state=TrialState.PRUNED, user_attrs={"signature": "kv_cache_oom"})
    screen.fit([failed], space.values)
    assert screen.predict(space.values({"ctx-size": 65536, "cache-type-k": "q4_0"})) is None
    assert screen.predict(space.values({"ctx-size": 65536, "cache-type-k": "f16"})).signature == "kv_cache_oom"


def test_llamacpp_no_history_no_prediction() -> None:
    screen = LlamaCppScreen()
    screen.fit([])
    assert screen.predict({"ctx-size": 10**7}) is None


def _real(name: str, tmp_path: Path) -> optuna.Study:
    shutil.copytree(FIXTURES / "gpu" / name, tmp_path / name)
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / name / 'study.db'}")


def test_vllm_pool_line_from_real_runs_predicts_the_real_no_kv_failure(tmp_path: Path) -> None:
    study = _real("h200-vllm", tmp_path)
    trials = study.get_trials()
    screen = screen_for("vllm")
    # what was known before trial 1 in a different order: the two successes (util 0.9 and 0.3)
    screen.fit([trials[0], trials[3]])
    prediction = screen.predict({"gpu-memory-utilization": 0.10, "max-model-len": 8192, "max-num-seqs": 128})
    assert prediction is not None and prediction.signature == "no_kv_cache_memory"  # the real trial 1 failed so
    assert screen.predict({"gpu-memory-utilization": 0.6, "max-model-len": 8192}) is None
    too_long = screen.predict({"gpu-memory-utilization": 0.3, "max-model-len": 2000000})
    assert too_long is not None and too_long.signature == "max_model_len_exceeds_kv"  # the real trial 2 failed so


def test_sglang_would_have_skipped_the_second_real_context_failure(tmp_path: Path) -> None:
    study = _real("h200-sglang", tmp_path)
    trials = study.get_trials()
    screen = screen_for("sglang")
    screen.fit(trials[:3])  # what the study knew when it launched trial 3
    prediction = screen.predict(trials[3].params)
    assert prediction is not None and prediction.signature == "context_above_derived"
    assert screen.predict(trials[0].params) is None
