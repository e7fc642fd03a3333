"""The pre-screen: predictions from a study's own history, checked against real runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tests.conftest import FIXTURES
from tuner.results.screen import screen_for
from tuner.trials import TrialRecord, read_trials

D = {
    "ctx-size": CategoricalDistribution([2048, 8192, 16384, 32768, 65536]),
    "cache-type-k": CategoricalDistribution(["f16", "q8_0", "q4_0"]),
    "cache-type-v": CategoricalDistribution(["f16", "q8_0", "q4_0"]),
}


def _trial(params: dict, started: bool) -> TrialRecord:
    if started:
        return TrialRecord.of(create_trial(params=params, distributions=D, values=[1.0, 1.0]))
    return TrialRecord.of(
        create_trial(params=params, distributions=D, state=TrialState.PRUNED, user_attrs={"signature": "kv_cache_oom"})
    )


def test_llamacpp_needs_at_least_a_failure_fails() -> None:
    screen = screen_for("llamacpp")
    screen.fit(
        [
            _trial({"ctx-size": 65536, "cache-type-k": "f16", "cache-type-v": "f16"}, started=False),
            _trial({"ctx-size": 8192, "cache-type-k": "f16", "cache-type-v": "f16"}, started=True),
        ]
    )
    same = screen.predict({"ctx-size": 65536, "cache-type-k": "f16", "cache-type-v": "f16"})
    assert same is not None and same.signature == "kv_cache_oom" and same.numbers["from_trial"] == 0
    # a quantized cache needs less: between a success and the failure -> launch, never a guess
    assert screen.predict({"ctx-size": 65536, "cache-type-k": "q4_0", "cache-type-v": "q4_0"}) is None
    assert screen.predict({"ctx-size": 16384, "cache-type-k": "f16", "cache-type-v": "f16"}) is None
    # a knob the memory model does not know, set differently: no comparison, no skip
    assert screen.predict({"ctx-size": 65536, "cache-type-k": "f16", "cache-type-v": "f16", "flash-attn": "off"}) is None


def test_llamacpp_tied_v_type_is_seen(tmp_path) -> None:
    """With V tied to K, a q4_0 config needs q4_0 for both: never mistaken for f16 V."""
    from tests.conftest import tiny_space
    from tuner.app.prepare import validate

    raw = tiny_space()
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [8192, 65536]},
        "cache-type-k": {"type": "categorical", "choices": ["f16", "q4_0"]},
    }
    raw["tied"] = {"cache-type-v": "cache-type-k"}
    space = validate(raw, "t.yaml")
    screen = screen_for("llamacpp")
    failed = create_trial(
        params={"ctx-size": 65536, "cache-type-k": "f16"},
        distributions={k: D[k] for k in ("ctx-size", "cache-type-k")},
        state=TrialState.PRUNED,
        user_attrs={"signature": "kv_cache_oom"},
    )
    screen.fit([TrialRecord.of(failed)], space.values)
    assert screen.predict(space.values({"ctx-size": 65536, "cache-type-k": "q4_0"})) is None
    assert screen.predict(space.values({"ctx-size": 65536, "cache-type-k": "f16"})).signature == "kv_cache_oom"


def test_llamacpp_no_history_no_prediction() -> None:
    screen = screen_for("llamacpp")
    screen.fit([])
    assert screen.predict({"ctx-size": 10**7}) is None


V = {
    "gpu-memory-utilization": FloatDistribution(0.01, 0.5, log=True),
    "max-model-len": IntDistribution(3072, 24576),
    "max-num-seqs": IntDistribution(16, 320),
    "kv-cache-dtype": CategoricalDistribution(["auto", "fp8"]),
}


def _vllm(
    util: float,
    length: int,
    seqs: int,
    dtype: str,
    *,
    kv: int | None = None,
    failed: str | None = None,
    details: dict | None = None,
) -> TrialRecord:
    params = {"gpu-memory-utilization": util, "max-model-len": length, "max-num-seqs": seqs, "kv-cache-dtype": dtype}
    if failed is None:
        return TrialRecord.of(
            create_trial(params=params, distributions=V, values=[1.0, 1.0], user_attrs={"capacity": {"kv_tokens": kv}})
        )
    return TrialRecord.of(
        create_trial(
            params=params,
            distributions=V,
            state=TrialState.PRUNED,
            user_attrs={"signature": failed, "evidence": {"details": details or {}}},
        )
    )


def test_the_new_users_vllm_space_skips_none_of_the_five_configs_that_would_have_started() -> None:
    """Issue 23's night: two configs had started (util 0.0153 fp8 -> 144,336 KV tokens, 0.0202
    auto -> 99,056); the old pool line through them sloped down and skipped five configs with two
    to eleven times their memory. Nothing failed, so nothing may be skipped; with a real failure
    at a smaller utilization, still none of them (they have more memory than it)."""
    started = [_vllm(0.0153, 12288, 128, "fp8", kv=144_336), _vllm(0.0202, 16384, 256, "auto", kv=99_056)]
    five = [
        (0.039, 24576, 320, "auto"),
        (0.086, 8192, 64, "auto"),
        (0.113, 16384, 200, "fp8"),
        (0.209, 20480, 300, "auto"),
        (0.222, 3072, 16, "auto"),
    ]
    screen = screen_for("vllm")
    for history in (started, [*started, _vllm(0.0105, 16384, 256, "auto", failed="no_kv_cache_memory")]):
        screen.fit(history)
        for util, length, seqs, dtype in five:
            values = {"gpu-memory-utilization": util, "max-model-len": length, "max-num-seqs": seqs, "kv-cache-dtype": dtype}
            assert screen.predict(values) is None, values
    # the failure does decide for a config with no more memory and at least its needs (the one-sided case)
    skipped = screen.predict(
        {"gpu-memory-utilization": 0.01, "max-model-len": 24576, "max-num-seqs": 256, "kv-cache-dtype": "auto"}
    )
    assert skipped is not None and skipped.signature == "no_kv_cache_memory" and skipped.numbers["from_trial"] == 2
    # ... but not for fp8 at the same memory (it needs less) nor fewer sequences
    assert (
        screen.predict({"gpu-memory-utilization": 0.01, "max-model-len": 24576, "max-num-seqs": 256, "kv-cache-dtype": "fp8"})
        is None
    )
    assert (
        screen.predict({"gpu-memory-utilization": 0.01, "max-model-len": 24576, "max-num-seqs": 128, "kv-cache-dtype": "auto"})
        is None
    )


def test_a_failure_that_a_later_start_contradicts_is_no_evidence() -> None:
    flaky = _vllm(0.02, 8192, 256, "auto", failed="no_kv_cache_memory")
    screen = screen_for("vllm")
    screen.fit([flaky])
    assert (
        screen.predict({"gpu-memory-utilization": 0.019, "max-model-len": 8192, "max-num-seqs": 256, "kv-cache-dtype": "auto"})
        is not None
    )
    screen.fit([flaky, _vllm(0.015, 8192, 256, "auto", kv=40_000)])  # less memory, same needs: started
    assert screen.contradicted() == {0: 1}
    assert (
        screen.predict({"gpu-memory-utilization": 0.019, "max-model-len": 8192, "max-num-seqs": 256, "kv-cache-dtype": "auto"})
        is None
    )


def test_a_contradicted_skip_is_proposed_again_once(tmp_path: Path) -> None:
    """The driver re-queues what was skipped on a contradicted failure's word, once."""
    from tests.conftest import tiny_space
    from tuner import objectives
    from tuner.app.prepare import validate
    from tuner.base.artifacts import RunDir
    from tuner.orchestration.driver import Driver
    from tuner.trials.study import open_study

    raw = tiny_space()
    raw["parameters"] = {"ctx-size": {"type": "categorical", "choices": [8192, 65536]}}
    space = validate(raw, "t.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="c", storage="sqlite:///" + str(tmp_path / "c.db"), source="t.yaml")
    d = {"ctx-size": CategoricalDistribution([8192, 65536])}
    study.add_trial(
        create_trial(
            params={"ctx-size": 65536}, distributions=d, state=TrialState.PRUNED, user_attrs={"signature": "kv_cache_oom"}
        )
    )
    study.add_trial(
        create_trial(
            params={"ctx-size": 65536},
            distributions=d,
            state=TrialState.PRUNED,
            user_attrs={"screened": "kv_cache_oom", "evidence": {"details": {"from_trial": 0}}},
        )
    )
    driver = Driver(space, study, objective, RunDir(tmp_path / "c"), executor=None, trials=5, screen=screen_for("llamacpp"))  # type: ignore[arg-type]
    driver._requeue_contradicted()
    assert not study.get_trials(states=(TrialState.WAITING,)), "re-queued with nothing contradicting the failure"
    study.add_trial(create_trial(params={"ctx-size": 65536}, distributions=d, values=[1.0]))  # the same config started after all
    driver._requeue_contradicted()
    driver._requeue_contradicted()
    waiting = study.get_trials(states=(TrialState.WAITING,))
    assert [(t.system_attrs["fixed_params"], t.user_attrs["rescreen_of"]) for t in waiting] == [({"ctx-size": 65536}, 1)]
    from tuner.cli._status import screen_lines

    lines = screen_lines(study, space)  # what tune status (and the report) shows
    assert lines[0] == "pre-screen:" and lines[1].startswith("  trial 1 not launched, predicted kv_cache_oom (evidence: trial 0)")
    assert (
        lines[2]
        == "  CONTRADICTED: trial 0's failure, by trial 2 (no more memory, started); skipped on its word: 1; re-proposed: 1 as "
        "trial 3"
    )


def _real(name: str, tmp_path: Path) -> optuna.Study:
    shutil.copytree(FIXTURES / "gpu" / name, tmp_path / name)
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / name / 'study.db'}")


def test_vllm_real_failures_decide_only_one_sided(tmp_path: Path) -> None:
    """The real H200 study: the no-KV failure at 0.1 decides for less memory, never for more; the
    real 'estimated maximum model length 221,888' at 0.3 decides for longer lengths at <= 0.3;
    the real 221,904-token pool at 0.3 decides for a length above it there."""
    study = _real("h200-vllm", tmp_path)
    trials = read_trials(study)
    screen = screen_for("vllm")
    screen.fit([trials[0], trials[1]])
    less = screen.predict({"gpu-memory-utilization": 0.08, "max-model-len": 8192, "max-num-seqs": 128})
    assert less is not None and less.signature == "no_kv_cache_memory" and less.numbers["from_trial"] == 1
    assert screen.predict({"gpu-memory-utilization": 0.2, "max-model-len": 8192, "max-num-seqs": 128}) is None
    assert screen.predict({"gpu-memory-utilization": 0.08, "max-model-len": 8192, "max-num-seqs": 64}) is None
    screen.fit([trials[0], trials[2]])
    named = screen.predict({"gpu-memory-utilization": 0.3, "max-model-len": 262144, "max-num-seqs": 128})
    assert named is not None and named.numbers["rule"] == "engine_named_length" and named.numbers["limit"] == 221888
    assert screen.predict({"gpu-memory-utilization": 0.3, "max-model-len": 200000, "max-num-seqs": 128}) is None
    # within the pool's start-to-start variation (1.7 % measured on the H200 grid) of the named length: launched
    assert screen.predict({"gpu-memory-utilization": 0.3, "max-model-len": 225000, "max-num-seqs": 128}) is None
    assert screen.predict({"gpu-memory-utilization": 0.4, "max-model-len": 262144, "max-num-seqs": 128}) is None
    screen.fit([trials[3]])
    pool = screen.predict({"gpu-memory-utilization": 0.3, "max-model-len": 250000, "max-num-seqs": 128})
    assert pool is not None and pool.numbers["rule"] == "pool_reported" and pool.numbers["pool_tokens"] == 221904
    assert screen.predict({"gpu-memory-utilization": 0.3, "max-model-len": 225000, "max-num-seqs": 128}) is None


def test_sglang_would_have_skipped_the_second_real_context_failure(tmp_path: Path) -> None:
    study = _real("h200-sglang", tmp_path)
    trials = read_trials(study)
    screen = screen_for("sglang")
    screen.fit(trials[:3])  # what the study knew when it launched trial 3
    prediction = screen.predict(trials[3].params)
    assert prediction is not None and prediction.signature == "context_above_derived"
    assert screen.predict(trials[0].params) is None
