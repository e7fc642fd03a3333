"""`tune validate --confirm --timeout`: a confirmation that cannot end in the time its command has
is refused: before its server starts where even the least it needs is more, else once the server
is up, by its measured start, before each run.

On the H100 (2026-12-07) a 7-minute confirmation at 36.36 requests/s ran inside a device call
given 502 s: its first arrival came 93 s in, and the call's `timeout` cut it 30 s before its end,
with no verdict (docs/goodput.md, thirteenth session). The rule that followed reckoned the start
as the trial's x 1.25, and refused a vLLM run that would have ended with 115 s to spare: its
trial's start had been a cold one (fifteenth session). The committed SGLang study is the one used
here."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.conftest import ROOT, tune_here
from tuner.app.read import stored_space
from tuner.cli import _validate
from tuner.orchestration.confirm import STOP_S
from tuner.probes.long_run import AFTER_RUN_S, no_time
from tuner.space import ConfirmProbeSpec
from tuner.trials import record_of

NAME = "h200-sglang-goodput-rate"
CUT = ROOT / "docs/data/goodput/h100-sglang-2026-12-07d/confirm/study.db"  # the run cut 30 s short


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
    code = tune_here("validate", "--study", NAME, "--confirm", "--seconds", "7m", "--steps", "1", "--resume", "--timeout", "480s")
    said = capsys.readouterr()
    assert code != 0
    line = [row for row in (said.out + said.err).splitlines() if "--timeout" in row]
    assert len(line) == 1, said
    assert "a 7m00s run of trial 0 needs at least 8m08s" in line[0], line  # 86.6 x 0.5 + 420 + 15 + 10 = 488 s
    assert "its server started in 87 s at the search, x 0.5" in line[0] and "--seconds less" in line[0], line
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
    began = time.time()
    ran = _validate.run_confirmation(study, record, space, seconds=420.0, how="knee", steps=1, resume=True, timeout=596.0)
    assert ran == "ran" and asked["resume"] is True and asked["steps"] == 1
    assert began + 596.0 - STOP_S <= asked["until"] <= time.time() + 596.0 - STOP_S  # each run reckons with it
    _validate.run_confirmation(study, record, space, seconds=420.0, how="knee", steps=1, resume=True)
    assert asked["until"] is None  # no timeout: the steps as many as --steps says


def test_a_run_that_cannot_end_before_until_is_not_started() -> None:
    """The probe's check, before each run, once the server is up: the run's length and its tail
    (the drain before it, its last requests) against the time left."""
    spec = ConfirmProbeSpec(rate=36.36, duration=420.0, until=1_000_000.0)
    need = 420.0 + AFTER_RUN_S
    assert no_time(spec, 36.36, now=1_000_000.0 - need) is None
    short = no_time(spec, 32.7, now=1_000_000.0 - need + 1.0)
    assert (
        short == f"no time for 7m00s at 32.7 requests/s: {need - 1:.0f} s left before the command's timeout, {need:.0f} s needed"
    )
    assert no_time(spec.model_copy(update={"until": None}), 36.36, now=2e6) is None
