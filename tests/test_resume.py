"""Crash and interrupt: SIGKILL the tuner mid-trial and rerun; SIGINT a run. Real llama-server,
two 1-core partitions through Ray. Nothing of the first run may survive."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.conftest import tiny_space
from tuner.host.ledger import start_ticks

pytestmark = pytest.mark.integration


def _space(tmp_path: Path, trials: int) -> Path:
    raw = tiny_space()
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": 1}
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [2048, 4096]},
        "parallel": {"type": "int", "low": 1, "high": 2},
    }
    raw["probes"]["load"].update(requests=6, output_tokens=64)
    raw["budget"] = {"trials": trials}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _start(tmp_path: Path, space: Path, study: str, *, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    def ignore_sigint() -> None:  # what `tune run &` in a non-interactive script inherits
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "tuner", "run", "--space", str(space), "--study", study],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )


def _wait_for_servers(ledger: Path, count: int, timeout: float = 90) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        servers = [json.loads(p.read_text()) for p in ledger.glob("*.json")]
        servers = [s for s in servers if s["trial_dir"] != "ray-local-cluster"]
        if len(servers) >= count:
            return servers
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} servers started within {timeout}s")


def _alive(entry: dict) -> bool:
    return start_ticks(entry["pid"]) == entry["start_ticks"]


def test_sigkill_mid_trial_then_resume(tmp_path: Path, llama_server: Path) -> None:
    space = _space(tmp_path, trials=3)
    ledger = tmp_path / "runs" / "crash" / "servers"
    first = _start(tmp_path, space, "crash")
    servers = _wait_for_servers(ledger, 2)
    time.sleep(1.0)  # mid-probe
    everything = [json.loads(p.read_text()) for p in ledger.glob("*.json")]  # servers and Ray's processes
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)

    second = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--space", str(space), "--study", "crash"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 0, second.stdout + second.stderr
    assert "was interrupted: recorded as FAIL, params re-queued" in second.stdout
    assert not any(_alive(e) for e in everything), "a process of the killed run survived the rerun"

    study = optuna.load_study(study_name="crash", storage=f"sqlite:///{tmp_path}/runs/crash/study.db")
    trials = study.get_trials()
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 2 and all("interrupted" in t.user_attrs["error"] for t in failed)
    requeued = [t for t in trials if "requeued_from" in t.user_attrs]
    assert sorted(t.user_attrs["requeued_from"] for t in requeued) == sorted(t.number for t in failed)
    assert all(t.params == trials[t.user_attrs["requeued_from"]].params for t in requeued)
    # the budget counts launches: a proposal equal to a config already run is copied, not launched
    launched = [t for t in trials if t.state == TrialState.COMPLETE and "duplicate_of" not in t.user_attrs]
    assert len(launched) == 3
    assert all(trials[t.user_attrs["duplicate_of"]].params == t.params for t in trials if "duplicate_of" in t.user_attrs)
    assert not any(t.state == TrialState.RUNNING for t in trials)
    assert not [p for p in ledger.glob("*.json")], "ledger not empty after a clean finish"
    del servers


def test_sigint_stops_tears_down_and_records(tmp_path: Path, llama_server: Path) -> None:
    space = _space(tmp_path, trials=6)
    ledger = tmp_path / "runs" / "stop" / "servers"
    run = _start(tmp_path, space, "stop")
    servers = _wait_for_servers(ledger, 2)
    began = time.monotonic()
    os.kill(run.pid, signal.SIGINT)
    out, _ = run.communicate(timeout=60)
    assert time.monotonic() - began < 30, "did not exit within 30 s of SIGINT"
    assert run.returncode == 128 + signal.SIGINT, out  # a script can tell a stopped run from a finished one
    assert "stopped: stopped by SIGINT" in out
    assert not any(_alive(s) for s in servers)
    study = optuna.load_study(study_name="stop", storage=f"sqlite:///{tmp_path}/runs/stop/study.db")
    assert not any(t.state == TrialState.RUNNING for t in study.get_trials())
    trials = study.get_trials()
    interrupted = [t for t in trials if t.state == TrialState.FAIL and "interrupted" in t.user_attrs.get("error", "")]
    assert interrupted
    # each interrupted config waits in the queue for the next run (an enqueued grid point or
    # baseline has no other way back); a resume measures it first
    queued = {t.user_attrs["requeued_from"]: t for t in trials if t.state == TrialState.WAITING}
    assert sorted(queued) == sorted(t.number for t in interrupted)
    assert all(queued[t.number].system_attrs["fixed_params"] == t.params for t in interrupted)


def test_stop_with_sigint_inherited_as_ignored_and_a_second_run_refused(tmp_path: Path, llama_server: Path) -> None:
    """Started as a background job of a script (SIGINT ignored): a second run on the study is
    refused in one line naming the first; SIGINT stops the first without waiting out the
    grace, exit 130; every trial is recorded as what it was (measured ones COMPLETE)."""
    space = _space(tmp_path, trials=6)
    raw = yaml.safe_load(space.read_text())
    raw["probes"]["load"].update(duration=25, max_duration=25)  # stopped mid-probe, not between trials
    space.write_text(yaml.safe_dump(raw))
    ledger = tmp_path / "runs" / "bg" / "servers"
    run = _start(tmp_path, space, "bg", sigint_ignored=True)
    servers = _wait_for_servers(ledger, 2)

    second = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--space", str(space), "--study", "bg"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = second.stderr.strip().splitlines()
    assert second.returncode == 1 and len(lines) == 1, second.stderr
    assert lines[0].startswith(f"error: study 'bg' is being run by pid {run.pid} on "), lines
    assert all(_alive(s) for s in servers), "the refused run touched the first run's servers"

    began = time.monotonic()
    os.kill(run.pid, signal.SIGINT)  # the driver's handler hears it even so; the workers must too
    out, _ = run.communicate(timeout=60)
    assert time.monotonic() - began < 15, "the soft cancel did nothing: the stop waited out its grace"
    assert run.returncode == 128 + signal.SIGINT, out
    assert not any(_alive(s) for s in servers)
    study = optuna.load_study(study_name="bg", storage=f"sqlite:///{tmp_path}/runs/bg/study.db")
    trials = study.get_trials()
    for t in trials:
        if t.state == TrialState.WAITING:  # an interrupted trial's config, queued for the next run
            assert trials[t.user_attrs["requeued_from"]].state == TrialState.FAIL, t
            continue
        assert t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED), t
        finished = (tmp_path / "runs" / "bg" / "trials" / str(t.number) / "outcome.json").is_file()
        assert not (finished and t.state == TrialState.FAIL), f"trial {t.number} measured but recorded FAIL"


def _affinity(pid: int) -> str:
    with open(f"/proc/{pid}/status") as f:
        return next(line.split(":")[1].strip() for line in f if line.startswith("Cpus_allowed_list"))


def test_two_partitions_overlap_each_pinned_to_its_core(tmp_path: Path, llama_server: Path) -> None:
    space = _space(tmp_path, trials=2)
    run = _start(tmp_path, space, "pair")
    servers = _wait_for_servers(tmp_path / "runs" / "pair" / "servers", 2)
    pinned = sorted(_affinity(s["pid"]) for s in servers)
    out, _ = run.communicate(timeout=300)
    assert run.returncode == 0, out
    assert pinned == ["0", "1"]
    spans = []
    for n in (0, 1):
        timings = json.loads((tmp_path / "runs" / "pair" / "trials" / str(n) / "outcome.json").read_text())["timings"]
        spans.append((timings["started_at"], timings["ended_at"]))
    (a0, a1), (b0, b1) = spans
    assert max(a0, b0) < min(a1, b1), f"trials did not overlap: {spans}"
