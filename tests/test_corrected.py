"""A confirmation that broke and found a load below that held corrects the answer: the study's
reader shows the trial at the confirmed load (its SLO metrics, its objective values and its
re-runs'), keeps the search's figures beside it, and status, the pick and export say so; one that
broke and found none is refused by export unless forced. On the committed H200 vLLM study
(docs/data/goodput/h200-rate-2026-12-03/), with confirmations stored as tuner.confirm stores them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.conftest import ROOT, tune_here
from tuner.confirm import Confirmation
from tuner.confirmed import corrected, uncorrected_failure
from tuner.pick import pick
from tuner.trials import read_study, save_confirmation

DB = ROOT / "docs/data/goodput/h200-rate-2026-12-03/study.db"
NAME = "h200-vllm-goodput-rate"


def _study(tmp_path: Path) -> optuna.Study:
    runs = tmp_path / "runs" / NAME
    runs.mkdir(parents=True)
    shutil.copy(DB, runs / "study.db")
    return optuna.load_study(study_name=NAME, storage=f"sqlite:///{runs / 'study.db'}")


def _run(at: float, held: bool, goodput: float) -> dict[str, Any]:
    return {
        "at": at,
        "held": held,
        "seconds": 420.0 if held else 60.0,
        "broke": [] if held else ["ttft_p99 2.9 > 1"],
        "goodput": goodput,
    }


def _confirmation(runs: list[dict[str, Any]]) -> Confirmation:
    kept = next((r for r in runs if r["held"]), None)
    return Confirmation(
        0, {"rate": 60.0}, 420.0, runs[0]["held"], runs[0]["goodput"], 100.0, 7514.4, 818.7, -0.16, tuple(runs[0]["broke"]),
        runs=tuple(runs), confirmed_answer={"rate": kept["at"]} if kept else None,
        confirmed_goodput=kept["goodput"] if kept else None, confirmed_ci=150.0 if kept else None,
    )  # fmt: skip


def test_the_reader_shows_a_trial_at_its_confirmed_answer_and_keeps_the_search_s(tmp_path: Path, capsys: Any) -> None:
    study = _study(tmp_path)
    before = read_study(study).trial(0)
    assert before is not None and before.metrics["slo.rate"] == 60 and before.searched is None
    runs = [_run(60.0, False, 6900.0), _run(54.0, True, 6800.0)]
    save_confirmation(study, 0, _confirmation(runs).to_dict())
    after = read_study(study).trial(0)
    assert after is not None and after.searched is not None
    assert after.metrics["slo.rate"] == 54.0 and after.metrics["slo.rate_violated"] == 60.0
    assert after.metrics["slo.goodput"] == 6800.0 and after.metrics["slo.goodput_ci"] == 150.0
    assert after.searched["slo.rate"] == 60 and after.searched["slo.goodput"] == before.metrics["slo.goodput"]
    assert after.values is not None and after.values[0] == 6800.0  # slo.goodput is the first objective
    assert corrected(after.confirmed) == {"rate": 54.0} and not uncorrected_failure(after.confirmed)
    chosen = pick(read_study(study), "knee")
    assert chosen.values[0] == pytest.approx(6800.0) and "held a step below it: 54 requests/s" in chosen.describe(["g", "c"])
    assert tune_here("status", "--study", NAME, "--storage", f"sqlite:///{tmp_path}/runs/{NAME}/study.db") == 0
    out = capsys.readouterr().out
    assert "within the SLO: 54 requests/s" in out and "the answer is now 54 requests/s" in out, out


def test_export_refuses_an_answer_that_broke_with_no_load_below_that_held_unless_forced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    study = _study(tmp_path)
    save_confirmation(study, 0, _confirmation([_run(60.0, False, 6900.0), _run(54.0, False, 6700.0)]).to_dict())
    record = read_study(study).trial(0)
    assert record is not None and uncorrected_failure(record.confirmed) and record.metrics["slo.rate"] == 60  # not corrected
    monkeypatch.chdir(tmp_path)
    assert tune_here("export", "--study", NAME) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did not hold its confirmation run and no load below it held" in err[0] and "--force" in err[0]
    assert tune_here("export", "--study", NAME, "--force") == 0
    assert "--request-rate" not in capsys.readouterr().out  # the serve command, not a bench's


def test_reading_commands_print_only_their_own_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any) -> None:
    """No library chatter in a command's output (issue 47): Optuna's own handler printed "[I ...] A
    new study created in memory" in the middle of `tune report`."""
    _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    for args in (("report",), ("status",), ("export",), ("pareto", "--out", str(tmp_path / "front"))):
        assert tune_here(*args, "--study", NAME) == 0, args
        out, err = capfd.readouterr()
        for line in (out + err).splitlines():
            assert not line.startswith("[I ") and "INFO" not in line, (args, line)
