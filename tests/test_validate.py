"""The reference config's runs: its own trial, the start and the end of a run, and drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution

from tests.conftest import tiny_space

from tuner.validate import _Item, store_reference


def test_the_reference_trial_joins_its_runs_even_when_it_ran_after_the_start_measurement() -> None:
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr("tuner.objectives", {"objectives": [{"metric": "load.output_tok_s"}, {"metric": "recall.effective_context"}]})
    params = {"ctx-size": 4096}
    store_reference(study, params, _Item("reference", params, values=[(63.8, 1024.0)]), "start")
    assert study.user_attrs["noise"]["labels"] == ["start"]  # the search has not run yet
    study.add_trial(optuna.trial.create_trial(
        params=params, distributions={"ctx-size": CategoricalDistribution([4096])}, values=[61.9, 1024.0]))
    noise = store_reference(study, params, _Item("reference", params, values=[(64.0, 1024.0)]), "end")
    assert noise["labels"] == ["trial", "start", "end"]
    assert [r[0] for r in noise["runs"]] == [61.9, 63.8, 64.0]
    assert noise["drift"] is None  # 63.8 -> 64.0 is inside the noise of these runs


def test_drift_is_judged_at_the_latest_pause_before_the_end() -> None:
    study = optuna.create_study(directions=["maximize", "maximize"])
    study.set_user_attr("tuner.objectives", {"objectives": [{"metric": "load.output_tok_s"}, {"metric": "recall.effective_context"}]})
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
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reference again after 2 trials" in out.stdout
    study = optuna.load_study(study_name="k", storage=f"sqlite:///{tmp_path}/runs/k/study.db")
    assert study.user_attrs["noise"]["labels"][:4] == ["trial", "start", "after2", "end"]
