"""A command reads its study once: `tune status`, `export`, `pareto`, `report` and `limits` each fetch the
study's attrs once and its trials once from storage, then compute from that record (pick, noise,
gains, fronts, the export). Counted at Optuna's own storage, so no path around the record hides."""

from __future__ import annotations

import collections
import shutil
from collections.abc import Iterator
from pathlib import Path

import optuna.storages._rdb.storage as rdb
import pytest

from tests.conftest import ROOT, tune_here
from tuner.app.read import read_record

STUDY = ROOT / "docs/data/goodput/h200-vllm-goodput.db"  # a committed study: 9 trials, a front of 3
READS = ("get_study_user_attrs", "_get_trials")


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[collections.Counter[str]]:
    counts: collections.Counter[str] = collections.Counter()
    for name in READS:
        original = getattr(rdb.RDBStorage, name)

        def counted(self: object, *args: object, _original: object = original, _name: str = name, **kw: object) -> object:
            counts[_name] += 1
            return _original(self, *args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(rdb.RDBStorage, name, counted)
    shutil.copy(STUDY, tmp_path / "study.db")
    monkeypatch.chdir(tmp_path)
    yield counts


@pytest.mark.parametrize(
    "command",
    [["status"], ["export"], ["export", "--format", "json"], ["pareto", "--out", "p"], ["report", "--out", "r"], ["limits"]],
)
def test_a_command_reads_its_study_once(
    command: list[str], reads: collections.Counter[str], capsys: pytest.CaptureFixture[str]
) -> None:
    trial = ["--trial", "5"] if command[0] == "limits" else []  # the knee
    code = tune_here(*command, *trial, "--study", "h200-vllm-goodput", "--storage", "sqlite:///study.db")
    assert code == 0, capsys.readouterr()
    shown = capsys.readouterr().out + (Path("r.md").read_text() if command[0] == "report" else "")
    # it ran to its end: every output names the pick's params, limits its SLO answer (208 clients)
    assert ("parallel calls in SLO   208" if trial else "max-num-seqs") in shown
    assert dict(reads) == {"get_study_user_attrs": 1, "_get_trials": 1}


def test_the_record_holds_what_the_commands_compute_from(reads: collections.Counter[str]) -> None:
    from tuner.results.pick import candidates, describe_noise, pick

    record = read_record("h200-vllm-goodput", "sqlite:///study.db")
    assert record.name == "h200-vllm-goodput" and len(record.trials) == 9
    assert pick(record, "knee").number == 5 and len(candidates(record)) == 5 and describe_noise(record)
    assert dict(reads) == {"get_study_user_attrs": 1, "_get_trials": 1}
