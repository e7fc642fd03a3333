"""A confirmation that broke and found a load below that held corrects the answer: the study's
reader shows the trial at the confirmed load (its SLO metrics, its objective values and its
re-runs'), keeps the search's figures beside it, and status, the pick and export say so; one that
broke and found none is refused by export unless forced. On the committed H200 vLLM study
(docs/data/goodput/h200-rate-2026-12-03/), with confirmations stored as tuner.orchestration.confirm stores them."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.conftest import ROOT, tune_here
from tuner.base.exceptions import ConfigError
from tuner.host.fingerprint import HostFingerprint
from tuner.orchestration.confirm import Confirmation
from tuner.results.confirmation import corrected, describe, uncorrected_failure
from tuner.results.pick import pick
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
        "ttft_p99": 0.4 if held else 2.9,
        "achieved_over_offered": 1.0,
        "completion_rate": at - 0.3,
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
    # the figures at the answer are the run's that held there, not the search's at 60/s (on the H200
    # status said "35 requests/s (... 47.4/s completed; held 60 s)" of a 7-minute run at 35: the 48's)
    assert (after.metrics["slo.completion_rate"], after.metrics["slo.held_s"], after.metrics["slo.ttft_p99"]) == (53.7, 420, 0.4)
    assert "slo.send_lag_p99" not in after.metrics
    # the per-GPU goodput follows (on the H200 the pick's metrics said 6,081 per GPU of one GPU beside
    # a goodput of 4,440: the search's at 48/s)
    assert after.metrics["slo.goodput_per_gpu"] == 6800.0 and after.metrics["slo.goodput_per_gpu_ci"] == 150.0
    assert after.searched["slo.completion_rate"] == before.metrics["slo.completion_rate"]
    assert after.values is not None and after.values[0] == 6800.0  # slo.goodput is the first objective
    assert corrected(after.confirmed) == {"rate": 54.0} and not uncorrected_failure(after.confirmed)
    chosen = pick(read_study(study), "knee")
    assert chosen.values[0] == pytest.approx(6800.0) and "held a step below it: 54 requests/s" in chosen.describe(["g", "c"])
    assert tune_here("status", "--study", NAME, "--storage", f"sqlite:///{tmp_path}/runs/{NAME}/study.db") == 0
    out = capsys.readouterr().out
    assert "within the SLO: 54 requests/s" in out and "the answer is now 54 requests/s" in out, out
    assert "100.0% of the schedule sent, 53.7/s completed; held 420 s)" in out, out


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


def test_status_and_the_pick_say_an_answer_that_broke_with_no_load_below_that_held_is_none_to_size_on(
    tmp_path: Path, capsys: Any
) -> None:
    """On the H100 (2026-12-06) status headed such a study "within the SLO: 48 requests/s" with only
    the first run's verdict under it, and the pick said "confirmed: no result" of a confirmation with
    two runs that broke: every run, the cut one and the verdict are shown, and the headline says the
    figure is the short windows' only."""
    study = _study(tmp_path)
    found = _confirmation([_run(60.0, False, 6900.0), _run(54.0, False, 6700.0)]).to_dict()
    found |= {"failure": "interrupted (SystemExit)", "cut_run": {"at": 48.6, "seconds": 380.0, "of": 420.0, "broke": []}}
    save_confirmation(study, 0, found)
    described = pick(read_study(study), "knee").describe(["g", "c"])
    assert "confirmed: NOT held over 7 min at its SLO answer, nor at any step below it down to 54 requests/s" in described
    assert tune_here("status", "--study", NAME, "--storage", f"sqlite:///{tmp_path}/runs/{NAME}/study.db") == 0
    out = capsys.readouterr().out
    assert "within the SLO in the search's short windows only (NOT confirmed): 60 requests/s" in out, out
    assert "step down to 54 requests/s: 1.0 min, did NOT hold (ttft_p99 2.9 > 1)" in out, out
    assert "the run at 48.6 requests/s was cut after 380 s of 420: within the SLO so far" in out, out
    assert "the search's 60 requests/s is no answer to size on" in out, out


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


class _Cut:
    """An executor that stands in for the engine where the driver's plumbing is what is tested: it
    writes the runs a confirmation would have finished (as the probe does) and then is cut by
    SIGTERM (``SystemExit``, as `timeout` ends `tune validate`), or returns them as the result."""

    max_parallel = 1

    def __init__(self, runs: list[dict[str, Any]], *, cut: bool, so_far: dict[str, Any] | None = None) -> None:
        self.runs, self.cut, self.so_far = runs, cut, so_far
        self.asked: list[Any] = []

    def submit(self, space: Any, params: dict[str, Any], trial_dir: Path, partition: Any, ledger: Any = None) -> Any:
        import json
        from concurrent.futures import Future

        from tuner.base.records import Capacity, ProbeResult, Timings, TrialOutcome
        from tuner.probes.long_run import RUNS_FILE

        self.asked.append(space.probes.confirm)
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / RUNS_FILE).write_text("".join(json.dumps(r) + "\n" for r in self.runs))
        if self.so_far is not None:  # the run under way when the cut came, as the probe keeps it
            from tuner.probes.long_run import PARTIAL_FILE, run_so_far

            (trial_dir / PARTIAL_FILE).write_text(json.dumps(run_so_far(space.probes.confirm, 54.0, self.so_far)))
        if self.cut:
            raise SystemExit(143)
        done: Future[Any] = Future()
        result = ProbeResult("confirm", {"goodput": self.runs[-1]["goodput"]}, {"runs": self.runs})
        done.set_result(TrialOutcome(params, (), Capacity(), (result,), Timings()))
        return done

    def cancel(self, future: Any, *, force: bool) -> None:
        pass

    def shutdown(self) -> None:
        pass


def test_a_confirmation_cut_short_keeps_its_finished_runs_and_resumes_a_step_below(tmp_path: Path) -> None:
    """A 7-minute confirmation whose first run broke is cut by SIGTERM during the step below (the
    H200's 10-minute commands): the broken run is stored, marked cut, and export refuses the
    answer; `--resume` goes on one step below the stored run (54/s, not the answer again), and
    its run that holds corrects the answer, with every run kept."""
    from tuner.app.read import stored_space
    from tuner.base.artifacts import RunDir
    from tuner.orchestration.confirm import confirm

    study = _study(tmp_path)
    space, run_dir = stored_space(study), RunDir(tmp_path / "runs" / NAME)
    # cut 414 s into the 7-minute run at 54/s (the H200's cut run: 6 s short, and nothing kept of it)
    so_far = {"window_s": 414.0, "output_tok_s": 6790.0, "ttft_p99": 0.42, "itl_p99": 0.031, "error_rate": 0.0, "growth": 0.002}
    from tuner.probes.load import request_body

    load = space.load_spec()
    assert load is not None
    sent = request_body(load.output_tokens, load.request)
    cut = _Cut([{**_run(60.0, False, 6900.0), "slices": [], "drift": -0.1, "body": sent}], cut=True, so_far=so_far)
    with pytest.raises(SystemExit):
        confirm(study, space, run_dir, cut, pick(read_study(study), "knee"), seconds=420.0, steps=2)  # type: ignore[arg-type]
    assert cut.asked[0].rate == 60.0 and cut.asked[0].steps == 2
    stored = read_study(study).trial(0)
    assert stored is not None and stored.confirmed is not None
    assert [r["at"] for r in stored.confirmed["runs"]] == [60.0] and stored.confirmed["failure"] == "interrupted (SystemExit)"
    assert uncorrected_failure(stored.confirmed) and stored.metrics["slo.rate"] == 60
    said = "\n".join(describe(stored.confirmed, 0))
    assert "cut short after 1 run(s)" in said
    assert stored.confirmed["cut_run"]["at"] == 54.0 and stored.confirmed["cut_run"]["seconds"] == 414.0
    assert (
        "the run at 54 requests/s was cut after 414 s of 420: within the SLO so far: goodput 6,790.0, TTFT p99 420 ms, "
        "ITL p99 31 ms, growth +0.002/s (not a verdict" in said
    ), said
    holds = _Cut([{**_run(54.0, True, 6800.0), "goodput_ci": 150.0}], cut=False)
    found = confirm(study, space, run_dir, holds, pick(read_study(study), "knee"), seconds=420.0, steps=0, resume=True)  # type: ignore[arg-type]
    assert holds.asked[0].rate == pytest.approx(54.0) and holds.asked[0].steps == 0
    assert [r["at"] for r in found.runs] == [60.0, 54.0] and not found.held and found.failure is None
    assert found.answer == {"rate": 60.0} and found.confirmed_answer == {"rate": 54.0} and found.corrected
    after = read_study(study).trial(0)
    assert after is not None and after.metrics["slo.rate"] == 54.0 and not uncorrected_failure(after.confirmed)
    with pytest.raises(ConfigError, match="already held at 54 requests/s"):
        confirm(study, space, run_dir, holds, pick(read_study(study), "knee"), seconds=420.0, resume=True)  # type: ignore[arg-type]


def test_a_confirmation_measured_with_another_request_body_is_not_resumed(tmp_path: Path) -> None:
    """The H200's 2026-12-04b study: its runs at 48 and 43.2 requests/s sent min_tokens, which
    tuner no longer sends (SGLang serves it with a penalizer on every decode step). A step below
    them measured without it would not compare with them: `--resume` refuses, in one line, before
    any server starts; a stored run whose body differs otherwise is refused the same way."""
    from tuner.app.read import stored_space
    from tuner.base.artifacts import RunDir
    from tuner.orchestration.confirm import confirm
    from tuner.probes.load import request_body

    db = ROOT / "docs/data/goodput/h200-sglang-2026-12-04b/study.db"
    runs = tmp_path / "runs" / "h200-sglang-goodput-rate"
    runs.mkdir(parents=True)
    subprocess.run(
        [sys.executable, str(ROOT / "scripts/confirm_trim.py"), str(db), str(runs / "study.db"), "--study",
         "h200-sglang-goodput-rate", "--below", "40"],
        check=True, capture_output=True,
    )  # fmt: skip
    study = optuna.load_study(study_name="h200-sglang-goodput-rate", storage=f"sqlite:///{runs / 'study.db'}")
    space, run_dir = stored_space(study), RunDir(runs)
    never = _Cut([], cut=False)
    with pytest.raises(ConfigError) as refused:
        confirm(study, space, run_dir, never, pick(read_study(study), "knee"), seconds=420.0, resume=True)  # type: ignore[arg-type]
    said = str(refused.value)
    assert "stored runs sent another request body (one with min_tokens, as tuner sent until 2026-12-06" in said, said
    assert "without --resume" in said and "\n" not in said and never.asked == []
    # a body recorded, but another one (a space whose request changed since)
    record = read_study(study).trial(0)
    assert record is not None and record.confirmed is not None
    load = space.load_spec()
    assert load is not None
    other = {**request_body(load.output_tokens, load.request), "top_p": 0.5}
    changed = {**record.confirmed, "runs": [{**r, "body": other} for r in record.confirmed["runs"]]}
    save_confirmation(study, 0, changed)
    with pytest.raises(ConfigError, match=r'"top_p": 0\.5'):
        confirm(study, space, run_dir, never, pick(read_study(study), "knee"), seconds=420.0, resume=True)  # type: ignore[arg-type]


def test_an_objective_on_goodput_per_gpu_takes_the_corrected_figure() -> None:
    """A space that ranks by slo.goodput_per_gpu (configs of several sizes) ranks a corrected trial
    by the goodput per GPU at its confirmed answer, in its values and its re-runs'."""
    from tuner.trials._record import _corrected_values

    metrics = {"slo.goodput_per_gpu": 3400.0, "recall.effective_context": 8192.0}
    values, again = _corrected_values(
        (3757.0, 8192.0), {"runs": [[3700.0, 8192.0]]}, metrics, ["slo.goodput_per_gpu", "recall.effective_context"]
    )
    assert values == (3400.0, 8192.0) and again is not None and again["runs"] == [[3400.0, 8192.0]]


def test_a_pick_confirmed_on_another_host_says_so_in_status_and_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """On the H100 (2026-12-06) the same SGLang config at 30 requests/s had ITL p99 35 ms on the
    host that searched and 10-12 ms on the one that confirmed, and nothing said the hosts differed:
    the stored hosts are compared, and a confirmation on a host unlike the search's is named."""
    study = _study(tmp_path)
    searched = HostFingerprint("gpu-a", "Intel(R) Xeon(R) Platinum 8480+", 16, ("NVIDIA H100 80GB HBM3",), "570.86", 24.0)
    with sqlite3.connect(tmp_path / "runs" / NAME / "study.db") as db:  # a finished trial's attrs, as a newer tuner stores them
        db.execute(
            "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, 'host', ?)",
            (study.trials[0]._trial_id, json.dumps(searched.to_dict())),
        )
    monkeypatch.chdir(tmp_path)
    for confirmed_on, said in (
        (searched, False),
        (HostFingerprint(**{**searched.to_dict(), "name": "gpu-b", "loop_ms": 11.5}), True),
    ):
        found = _confirmation([_run(60.0, True, 7400.0)]).to_dict() | {"host": confirmed_on.to_dict()}
        save_confirmation(study, 0, found)
        assert tune_here("export", "--study", NAME, "--format", "json") == 0
        out = capsys.readouterr().out
        assert ("trial 0 was searched on gpu-a" in out) is said, out
        assert tune_here("status", "--study", NAME) == 0
        assert ("confirmed on gpu-b" in capsys.readouterr().out) is said
    assert "host gpu-a vs gpu-b; a core's Python speed 24.0 vs 11.5 ms a loop (2.09 x)" in out
    assert "an SLO answer does not carry between hosts" in out
