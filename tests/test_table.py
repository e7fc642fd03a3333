"""The trials table: one row per trial, with where and when each one ran."""

from __future__ import annotations

import time
from datetime import datetime

import optuna

from tuner.table import launched, trials_frame


def test_a_trial_that_waited_for_its_gpus_is_shown_from_its_launch() -> None:
    """The x2 night's trial 6 (tp 1) was asked while trial 5 (tp 2) held both GPUs and launched
    100 s later: its partition was busy from the launch, not from the ask."""
    study = optuna.create_study()
    waited = study.ask()
    launched_at = time.time() + 100.0
    waited.set_user_attr("partition", [0])
    waited.set_user_attr("launched_at", launched_at)
    study.tell(waited, 1.0)
    older = study.ask()  # a study from before the launch stamp: its timings say when its server started
    older.set_user_attr("timings", {"started_at": launched_at - 50.0})
    study.tell(older, 2.0)
    never = study.ask()
    study.tell(never, state=optuna.trial.TrialState.FAIL)
    first, second, third = study.get_trials()
    assert launched(first) == datetime.fromtimestamp(launched_at) and launched(first) > first.datetime_start
    assert launched(second) == datetime.fromtimestamp(launched_at - 50.0) and launched(third) is None
    frame = trials_frame(study, every_metric=True)
    assert list(frame["partition"][:1]) == ["0"] and frame["launched_at"][0] == datetime.fromtimestamp(launched_at).isoformat()
    assert frame[["launched_at", "partition"]].iloc[2].isna().all()  # never launched
