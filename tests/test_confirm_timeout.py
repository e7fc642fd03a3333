"""`tune validate --confirm --timeout`: a confirmation that cannot end in the time its command has
is refused before its server starts, and its steps down get what is left after the first run.

On the H100 (2026-12-07) a 7-minute confirmation at 36.36 requests/s ran inside a device call
given 502 s: its first arrival came 93 s in, and the call's `timeout` cut it 30 s before its end,
with no verdict (docs/goodput.md, thirteenth session). The committed study it ran on is the one
used here."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.conftest import ROOT, tune_here
from tuner.app.read import stored_space
from tuner.cli import _validate
from tuner.orchestration.confirm import AROUND_S, START_FACTOR
from tuner.trials import record_of

NAME = "h200-sglang-goodput-rate"
CUT = ROOT / "docs/data/goodput/h100-sglang-2026-12-07d/confirm/study.db"  # the run cut 30 s short
STARTED_S = 86.63  # its trial's server start at the search (timings.startup_s)


@pytest.fixture()
def study_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    runs = tmp_path / "runs" / NAME
    runs.mkdir(parents=True)
    shutil.copy(CUT, runs / "study.db")
    monkeypatch.chdir(tmp_path)
    return runs


def test_a_run_that_cannot_end_in_the_timeout_is_refused_before_its_server_starts(
    study_here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = tune_here("validate", "--study", NAME, "--confirm", "--seconds", "7m", "--steps", "1", "--resume", "--timeout", "502s")
    said = capsys.readouterr()
    assert code != 0
    line = [row for row in (said.out + said.err).splitlines() if "--timeout" in row]
    assert len(line) == 1, said
    assert "a 7m00s run of trial 0 needs about 9m18s" in line[0], line  # 86.6 x 1.25 + 30 + 420 = 558 s
    assert "its server started in 87 s at the search" in line[0] and "--seconds less" in line[0], line
    assert not (study_here / "confirm").exists()
    stored = optuna.load_study(study_name=NAME, storage=f"sqlite:///{study_here / 'study.db'}")
    assert stored.user_attrs["confirmed.0"]["runs"][-1]["at"] == pytest.approx(40.4)  # nothing written over


def test_the_steps_get_the_time_left_after_the_first_runs_start(study_here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: dict[str, Any] = {}

    def confirm_pick(*args: Any, **kwargs: Any) -> str:
        asked.update(kwargs)
        return "ran"

    monkeypatch.setattr(_validate, "confirm_pick", confirm_pick)
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{study_here / 'study.db'}")
    record = record_of(study)
    space = stored_space(record)
    ran = _validate.run_confirmation(study, record, space, seconds=420.0, how="knee", steps=1, resume=True, timeout=596.0)
    assert ran == "ran" and asked["resume"] is True and asked["steps"] == 1
    assert asked["budget"] == pytest.approx(596.0 - STARTED_S * START_FACTOR - AROUND_S, abs=0.1)
    _validate.run_confirmation(study, record, space, seconds=420.0, how="knee", steps=1, resume=True)
    assert asked["budget"] is None  # no timeout: the steps as many as --steps says
