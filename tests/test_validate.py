"""The reference config's runs: its own trial, the start and the end of a run, and drift."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution

from tests.conftest import tiny_space
from tuner.orchestration.validate import _Item, store_reference, top_candidates


def test_the_reference_trial_joins_its_runs_even_when_it_ran_after_the_start_measurement() -> None:
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr(
        "tuner.objectives", {"objectives": [{"metric": "load.output_tok_s"}, {"metric": "recall.effective_context"}]}
    )
    params = {"ctx-size": 4096}
    store_reference(study, params, _Item("reference", params, values=[(63.8, 1024.0)]), "start")
    assert study.user_attrs["noise"]["labels"] == ["start"]  # the search has not run yet
    study.add_trial(
        optuna.trial.create_trial(
            params=params, distributions={"ctx-size": CategoricalDistribution([4096])}, values=[61.9, 1024.0]
        )
    )
    noise = store_reference(study, params, _Item("reference", params, values=[(64.0, 1024.0)]), "end")
    assert noise["labels"] == ["trial", "start", "end"]
    assert [r[0] for r in noise["runs"]] == [61.9, 63.8, 64.0]
    assert noise["drift"] is None  # 63.8 -> 64.0 is inside the noise of these runs


def test_drift_is_judged_at_the_latest_pause_before_the_end() -> None:
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr(
        "tuner.objectives", {"objectives": [{"metric": "load.output_tok_s"}, {"metric": "recall.effective_context"}]}
    )
    params = {"ctx-size": 4096}
    for value, when in ((64.0, "start"), (64.4, "start"), (63.6, "start"), (40.0, "after4")):
        noise = store_reference(study, params, _Item("reference", params, values=[(value, 1024.0)]), when)
    assert noise["labels"] == ["start", "start", "start", "after4"]
    assert noise["drift"] == pytest.approx(40.0 / 64.0 - 1)  # far beyond a floor of ~0.6 %


@pytest.mark.integration
def test_the_reference_runs_again_every_k_trials(tmp_path: Path, llama_server: Path) -> None:
    """`remeasure.every`: a real tune of the tiny space pauses after 2 trials for the reference."""
    raw = tiny_space()
    raw["parameters"] = {"ctx-size": {"type": "categorical", "choices": [1024, 2048, 4096]}}
    raw["enqueue"] = [{"ctx-size": 2048}]
    raw["budget"] = {"trials": 3}
    raw["remeasure"] = {"every": 2, "share": 2.0, "top": 1}
    space = tmp_path / "t.yaml"
    space.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--space", str(space), "--study", "k", "--executor", "inline"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reference again after 2 trials" in out.stdout
    assert re.search(r"\[1/3\] trial \d+ COMPLETE +load\.output_tok_s [\d,.]+ \| ok", out.stdout), out.stdout  # labelled values
    study = optuna.load_study(study_name="k", storage=f"sqlite:///{tmp_path}/runs/k/study.db")
    assert study.user_attrs["noise"]["labels"][:4] == ["trial", "start", "after2", "end"]


def test_a_race_spends_its_launches_only_on_the_tied_configs(tmp_path: Path) -> None:
    """Three configs: two within noise of each other (true 100 vs 90), one far behind (50). The
    race re-measures only the tied pair and stops within its budget. Measurements are drawn (5 %
    noise) from the true values: no engine produces chosen values on demand."""
    import random
    from concurrent.futures import Future

    from optuna.distributions import CategoricalDistribution

    from tuner import objectives
    from tuner.app.prepare import validate
    from tuner.base.artifacts import RunDir
    from tuner.base.records import Capacity, ProbeResult, Timings, TrialOutcome
    from tuner.orchestration.driver import record
    from tuner.orchestration.validate import race
    from tuner.trials.study import open_study

    truth = {2048: 100.0, 4096: 90.0, 8192: 50.0}
    measured: list[int] = []
    rng = random.Random(1)

    def outcome(ctx: int, value: float) -> TrialOutcome:
        probes = (ProbeResult("load", {"output_tok_s": value, "output_tok_s_ci": 0.025 * value, "error_rate": 0.0}),)
        return TrialOutcome({"ctx-size": ctx}, (), Capacity(), probes, Timings())

    class Draw:
        max_parallel = 1

        def submit(self, space, params, trial_dir, partition, ledger=None):
            measured.append(params["ctx-size"])
            future: Future = Future()
            future.set_result(outcome(params["ctx-size"], truth[params["ctx-size"]] * (1 + rng.gauss(0, 0.05))))
            return future

    raw = tiny_space()
    raw["parameters"] = {"ctx-size": {"type": "categorical", "choices": [2048, 4096, 8192]}}
    space = validate(raw, "t.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="r", storage=optuna.storages.InMemoryStorage(), source="t.yaml")  # type: ignore[arg-type]
    for ctx, first in ((2048, 92.0), (4096, 95.0), (8192, 50.0)):  # an unlucky first run each
        study.enqueue_trial({"ctx-size": ctx})
        trial = study.ask({"ctx-size": CategoricalDistribution([2048, 4096, 8192])})
        record(study, trial, RunDir(tmp_path), objective, outcome=outcome(ctx, first))
    assert sorted(t.params["ctx-size"] for t in study.trials) == [2048, 4096, 8192]

    used = race(study, space, objective, RunDir(tmp_path), Draw(), budget=12, how="max-throughput")
    assert 0 < used <= 12 and len(measured) == used
    assert 8192 not in measured, "a config outside the tie was re-measured"


def test_a_revalidation_states_the_mean_the_pick_uses() -> None:
    """The issue-23 case: the trial's own run disturbed (2.5 tok/s), three quiet re-runs: the
    revalidation's mean leaves it out, as the pick and the noise floor do."""
    from tuner.orchestration.validate import Revalidation

    r = Revalidation(trial=0, original=(2.5, 1024.0), runs=((50.7, 1024.0), (47.1, 1024.0), (54.4, 1024.0)), failures=())
    assert r.mean == pytest.approx(((50.7 + 47.1 + 54.4) / 3, 1024.0))
    assert len(r.all_runs) == 4 and r.to_dict()["runs"][0] == [2.5, 1024.0]  # every run is kept as evidence


def test_the_pick_is_always_among_the_configs_re_measured() -> None:
    """Five configs on the front; the three fastest are not the knee (60 tok/s at 6,000 tokens is):
    the knee goes first, then the front by throughput."""
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr(
        "tuner.objectives", {"objectives": [{"metric": "load.output_tok_s"}, {"metric": "recall.effective_context"}]}
    )
    for n, (tok_s, ctx) in enumerate([(100, 1000), (95, 1500), (92, 1800), (60, 6000), (50, 8000)]):
        dist = {"ctx-size": CategoricalDistribution([n])}
        study.add_trial(optuna.trial.create_trial(params={"ctx-size": n}, distributions=dist, values=[tok_s, ctx]))
    assert [c.number for c in top_candidates(study, 3)] == [3, 0, 1]
