"""The reference config's runs: its own trial, the start and the end of a run, and drift."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution

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
