"""The host a figure was measured on: stored with each trial, read back, and compared.

On the H100 (2026-12-06) the same SGLang config at the same 30 requests/s had ITL p99 35 ms on the
host that searched and 10-12 ms on the one that confirmed (docs/goodput.md): an answer belongs to
its host, so the host is kept beside it."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from itertools import count
from pathlib import Path

import optuna
import pytest

from tests.conftest import ROOT, tune_here
from tuner.base.records import Capacity, Timings, TrialOutcome
from tuner.host import fingerprint
from tuner.host.fingerprint import HostFingerprint, apart, calibrate
from tuner.trials import Verdict, read_study, tell

H100 = "NVIDIA H100 80GB HBM3"
A = HostFingerprint("gpu-a", "Intel(R) Xeon(R) Platinum 8480+", 16, (H100,), "570.86", 24.0, (0, 1))


def test_the_calibration_is_the_least_of_its_runs_and_leaves_the_affinity_as_it_was() -> None:
    ticks = iter([0.0, 0.005, 1.0, 1.002, 2.0, 2.009])  # runs of 5, 2 and 9 ms
    before = os.sched_getaffinity(0)
    core = min(before)
    assert calibrate([core], n=10, repeats=3, clock=lambda: next(ticks)) == pytest.approx(2.0)
    assert os.sched_getaffinity(0) == before


def test_the_calibration_runs_the_loop_it_times() -> None:
    """A real run takes time in proportion to its work (the loop is not optimised away, nor skipped)."""
    small, large = calibrate(n=20_000, repeats=3), calibrate(n=200_000, repeats=3)
    assert 0 < small < large


def test_alike_hosts_are_not_apart_and_each_difference_is_named() -> None:
    assert apart(A, A) == []
    assert apart(A, HostFingerprint(**{**A.to_dict(), "loop_ms": 27.0, "gpus": (H100,), "cores": (2, 3)})) == []  # 1.12 x
    other = HostFingerprint("gpu-b", "AMD EPYC 9654", 16, ("NVIDIA H200",), "575.1", 12.0, (0,))
    found = apart(A, other)
    assert found[0] == "host gpu-a vs gpu-b" and "CPU Intel(R) Xeon(R) Platinum 8480+ vs AMD EPYC 9654" in found
    assert f"GPUs {H100} vs NVIDIA H200" in found and "driver 570.86 vs 575.1" in found
    assert "a core's Python speed 24.0 vs 12.0 ms a loop (2.00 x)" in found


def test_the_same_cards_are_one_machine_whose_calibration_moves_and_other_cards_another() -> None:
    """On one H100 machine the calibration read 26.9 ms at a confirmation and 15.1 ms at the bench
    eight minutes later (its decode steps unchanged), and every lent machine is named ``vm``: the
    GPUs' UUIDs say which machine it was."""
    vm = HostFingerprint("vm", "Intel(R) Xeon(R) Processor", 16, (H100,), "580.159.04", 26.88, (0,), ("GPU-3f2a9c1e-aa",))
    assert apart(vm, HostFingerprint(**{**vm.to_dict(), "loop_ms": 15.1})) == []
    other = HostFingerprint(**{**vm.to_dict(), "loop_ms": 15.1, "gpu_ids": ["GPU-91bc0d77-bb"]})
    assert apart(vm, other) == [
        "another machine (GPU GPU-3f2a9c1e... vs GPU-91bc0d77...)",
        "a core's Python speed 26.9 vs 15.1 ms a loop (1.78 x)",
    ]
    assert apart(vm, other, names=False) == ["a core's Python speed 26.9 vs 15.1 ms a loop (1.78 x)"]  # a cluster's alike nodes
    older = HostFingerprint(**{**vm.to_dict(), "loop_ms": 15.1, "gpu_ids": []})  # stored before the UUIDs were
    assert apart(vm, older) == ["a core's Python speed 26.9 vs 15.1 ms a loop (1.78 x)"]
    assert HostFingerprint.from_dict(other.to_dict()) == other and other.gpu_ids == ("GPU-91bc0d77-bb",)


def test_the_gpus_uuids_come_from_nvidia_smi_where_the_nvml_binding_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.host import devices

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, GPU-aaaa'\necho '1, GPU-bbbb'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(devices, "_nvml", lambda query, fallback: fallback())
    assert devices.gpu_uuids([1]) == ("GPU-bbbb",) and devices.gpu_uuids([0, 1]) == ("GPU-aaaa", "GPU-bbbb")


def test_a_stored_fingerprint_reads_back_and_one_never_stored_or_damaged_reads_as_none() -> None:
    assert HostFingerprint.from_dict(A.to_dict()) == A
    assert HostFingerprint(**A.to_dict()) == A and apart(A, HostFingerprint(**A.to_dict())) == []  # lists as stored: tuples
    assert HostFingerprint.from_dict(None) is None
    assert HostFingerprint.from_dict({"name": "x"}) is None  # no cpu: unreadable, not a crash
    assert (
        A.describe()
        == "gpu-a (Intel(R) Xeon(R) Platinum 8480+; 16 CPUs; 1 x NVIDIA H100 80GB HBM3; driver 570.86; Python loop 24.0 ms)"
    )


def test_the_cpu_model_is_read_from_cpuinfo_on_x86_and_arm(tmp_path: Path) -> None:
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R)  Xeon(R) CPU @ 2.20GHz\n")
    assert fingerprint._cpu_model(x86) == "Intel(R) Xeon(R) CPU @ 2.20GHz"
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nBogoMIPS\t: 2000.00\nCPU part\t: 0xd4f\n")  # no model name on Arm's cpuinfo
    assert fingerprint._cpu_model(arm)  # the platform's, never empty
    assert fingerprint._cpu_model(tmp_path / "missing")


def test_this_host_calibrates_on_the_cores_it_is_given() -> None:
    core = min(os.sched_getaffinity(0))
    here = fingerprint.this_host((), [core])
    assert here.cores == (core,) and here.loop_ms is not None and here.loop_ms > 0 and here.gpus == ()
    assert fingerprint.this_host(calibration=False).loop_ms is None


def test_a_trial_stores_the_host_it_ran_on_and_the_reader_gives_it_back() -> None:
    study = optuna.create_study(directions=["maximize"])
    numbers = count()
    for host in (A.to_dict(), None):
        trial = study.ask()
        outcome = TrialOutcome({}, ("x",), Capacity(), (), Timings(), host=host)
        tell(study, trial, Verdict.of(outcome, values=[float(next(numbers))]))
    stored = read_study(study)
    assert stored.trial(0).host == A.to_dict()  # type: ignore[union-attr]
    assert stored.trial(1).host is None  # type: ignore[union-attr]
    assert (
        TrialOutcome.from_dict(TrialOutcome({}, ("x",), Capacity(), (), Timings(), host=A.to_dict()).to_dict()).host
        == A.to_dict()
    )


def test_a_front_of_trials_on_unlike_hosts_is_said_so_in_status_and_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ray cluster of mixed nodes (or a study resumed on another machine) puts trials measured on
    different hosts side by side: on the committed H200 vLLM study (front: trials 0, 5, 8), trial
    5's host is made another node of the same kind (no warning), then one 2 x slower (a warning)."""
    name = "h200-vllm-goodput"
    runs = tmp_path / "runs" / name
    runs.mkdir(parents=True)
    shutil.copy(ROOT / "docs/data/goodput/h200-vllm-goodput.db", runs / "study.db")
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{runs / 'study.db'}")
    ids = {t.number: t._trial_id for t in study.trials}
    node = HostFingerprint("node-1", "AMD EPYC 9654", 192, ("NVIDIA H200",), "575.1", 12.0)
    monkeypatch.chdir(tmp_path)
    for number, host, said in ((0, node, False), (5, HostFingerprint(**{**node.to_dict(), "name": "node-2"}), False),
                               (8, HostFingerprint(**{**node.to_dict(), "name": "node-3", "loop_ms": 25.0}), True)):  # fmt: skip
        with sqlite3.connect(runs / "study.db") as db:  # as a newer tuner stores it with each trial
            db.execute(
                "INSERT INTO trial_user_attributes (trial_id, key, value_json) VALUES (?, 'host', ?)",
                (ids[number], json.dumps(host.to_dict())),
            )
        assert tune_here("status", "--study", name) == 0
        out = capsys.readouterr().out
        assert ("ran on unlike hosts" in out) is said, out
    assert "warning: trials 0 and 8 ran on unlike hosts (a core's Python speed 12.0 vs 25.0 ms a loop (0.48 x))" in out
    assert tune_here("report", "--study", name) == 0
    assert "warning: trials 0 and 8 ran on unlike hosts" in (runs / "report.md").read_text()


def test_the_device_check_says_whether_this_host_is_like_a_stored_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """scripts/same_host.py, run before device time goes into a run that only counts on the host of
    a stored figure: alike (exit 0), unlike with the difference named (1), unreadable (2). The stored
    calibration is left out of the alike case: on a shared machine two calibrations may differ."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("same_host", ROOT / "scripts" / "same_host.py")
    assert spec is not None and spec.loader is not None
    same_host = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(same_host)
    here = fingerprint.this_host((), (), calibration=False).to_dict()
    stored = tmp_path / "host.json"
    stored.write_text(json.dumps({**here, "name": "another-name"}))
    assert same_host.main([str(stored)]) == 0 and capsys.readouterr().out.splitlines()[-1] == "alike"
    stored.write_text(json.dumps({**here, "cpu": "Some Other CPU"}))
    assert same_host.main([str(stored)]) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("unlike: CPU Some Other CPU vs ")
    stored.write_text("{not json")
    assert same_host.main([str(stored)]) == 2
