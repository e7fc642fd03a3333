"""What tuning bought: the pick against the baseline (the reference config), both on fresh
servers, stated as "+X % +- Y" or "a tie". The runs here are figures the test states (a stand-in
executor that returns them); README's first command shows it on the real llama-server."""

from __future__ import annotations

import random
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.conftest import tiny_space
from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.base.records import Capacity, ProbeResult, Timings, TrialOutcome
from tuner.orchestration.driver import Driver
from tuner.orchestration.validate import measure_reference, revalidate
from tuner.results.gain import Gain, gains
from tuner.trials.study import open_study

BASELINE = {"ctx-size": 2048}


class Figures:
    """Each config's goodput and throughput, drawn around its true value (2 % noise)."""

    max_parallel = 1

    def __init__(self, truth: dict[int, tuple[float, float]]) -> None:
        self.truth, self.rng = truth, random.Random(3)

    def submit(self, space: Any, params: dict[str, Any], trial_dir: Path, partition: Any, ledger: Any = None) -> Future:
        goodput, tok_s = (v * (1 + self.rng.gauss(0, 0.02)) for v in self.truth[params["ctx-size"]])
        probes = (
            ProbeResult("load", {"output_tok_s": tok_s, "output_tok_s_ci": 0.01 * tok_s, "error_rate": 0.0}),
            ProbeResult("slo", {"goodput": goodput, "goodput_ci": 0.01 * goodput, "concurrency": 4.0}),
            ProbeResult("recall", {"effective_context": 1024.0}),
        )
        future: Future = Future()
        future.set_result(TrialOutcome(dict(params), ("figures",), Capacity(), probes, Timings()))
        return future

    def cancel(self, future: Future, *, force: bool) -> None:
        pass


def _study(tmp_path: Path, truth: dict[int, tuple[float, float]], name: str) -> tuple[Any, Any, optuna.Study]:
    """The goodput objective set on a one-parameter space whose first enqueued config is the baseline."""
    raw = tiny_space()
    raw["parameters"] = {"ctx-size": {"type": "categorical", "choices": sorted(truth)}}
    raw["probes"]["slo"] = {"max_levels": 3}
    raw["probes"]["recall"] = {"lengths": [1024]}
    raw["objectives"] = "goodput-vs-context-cpu"
    raw["enqueue"] = [BASELINE]
    space = validate(raw, "t.yaml")
    objective = objectives.load(space.objectives)
    return (
        space,
        objective,
        open_study(space, objective, name=name, storage=f"sqlite:///{tmp_path / f'{name}.db'}", source="t.yaml"),
    )


def _tune(tmp_path: Path, truth: dict[int, tuple[float, float]]) -> optuna.Study:
    space, objective, study = _study(tmp_path, truth, "g")
    executor, run_dir = Figures(truth), RunDir(tmp_path / "g")
    measure_reference(study, space, objective, run_dir, executor, runs=2)
    Driver(space, study, objective, run_dir, executor, trials=len(truth), write_csv=False).run()
    revalidate(study, space, objective, run_dir, executor, top=2, repeats=2)
    return study


def test_the_pick_beats_the_baseline_by_what_its_runs_say(tmp_path: Path) -> None:
    study = _tune(tmp_path, {2048: (50.0, 80.0), 4096: (75.0, 82.0)})
    chosen, found = gains(study)
    assert chosen is not None and chosen.trial.params == {"ctx-size": 4096}
    by = {g.metric: g for g in found}
    goodput, tok_s = by["slo.goodput"], by["load.output_tok_s"]
    assert goodput.pick_runs == 3 and goodput.baseline_runs == 5  # its trial + 2 re-runs; trial, 2 at the start, 2 at the end
    assert goodput.relative == pytest.approx(0.5, abs=0.05) and not goodput.tie
    assert goodput.describe().startswith(f"slo.goodput: +{goodput.relative:.1%} +- ")
    assert tok_s.tie and "a tie (" in tok_s.describe()  # 82 vs 80 at 2 % noise: inside the noise


def test_no_baseline_no_statement() -> None:
    study = optuna.create_study(directions=["maximize"])
    assert gains(study) == (None, [])


def test_a_gain_states_its_sign_and_noise() -> None:
    g = Gain("slo.goodput", 120.0, 3.0, 3, 100.0, 4.0, 4)
    assert g.relative == pytest.approx(0.2) and g.relative_hw == pytest.approx(0.05) and not g.tie
    assert g.describe() == "slo.goodput: +20.0% +- 5.0%: pick 120.0 +- 3.0 (3 runs), baseline 100.0 +- 4.0 (4 runs)"
    assert Gain("m", 101.0, 3.0, 2, 100.0, 3.0, 2).tie


def test_one_run_each_and_no_noise_floor_states_no_gain(tmp_path: Path) -> None:
    """Without a second run of anything, a half-width would be made up: no statement."""
    from tuner.orchestration.validate import _Item, store_reference

    truth = {2048: (50.0, 80.0), 4096: (75.0, 82.0)}
    space, objective, study = _study(tmp_path, truth, "one")
    Driver(space, study, objective, RunDir(tmp_path / "one"), Figures(truth), trials=2).run()
    store_reference(study, BASELINE, _Item("reference", BASELINE), "end")  # the baseline's own trial: one run
    chosen, found = gains(study)
    assert chosen is not None and found == []
