"""Cores other work keeps busy: /proc/stat's per-core ticks, the share busy over a sample, the
run's one-line warning, and a real busy loop read as busy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_space
from tuner.app.run import configure, trial_cores
from tuner.host import procfs
from tuner.host.busy import busy_cores, describe

STAT = """cpu  300 0 100 700 50 0 0 0 0 0
cpu0 100 0 50 300 50 0 0 0 0 0
cpu1 200 0 50 400 0 0 0 0 0 0
intr 12345
"""


def test_per_core_ticks_count_idle_and_iowait_as_not_busy() -> None:
    assert procfs.core_ticks(STAT) == {0: (150, 500), 1: (250, 650)}  # the aggregate "cpu" line is not a core


def test_the_busy_share_is_over_the_sample_only() -> None:
    samples = iter([{0: (150, 500), 1: (250, 650)}, {0: (160, 600), 1: (340, 750)}])
    slept: list[float] = []
    shares = busy_cores([0, 1, 7], 0.5, ticks=lambda: next(samples), sleep=slept.append)
    assert shares == pytest.approx({0: 0.1, 1: 0.9}) and slept == [0.5]  # core 7 is not on this machine: not guessed


def test_the_warning_names_only_the_busy_cores() -> None:
    line = describe({0: 0.1, 1: 0.93, 2: 0.5})
    assert line is not None and line.startswith("warning: busy before any trial started (core 1 93%,")
    assert "core 0" not in line and "core 2" not in line
    assert describe({0: 0.1, 1: 0.2}) is None


def test_a_busy_loop_pinned_to_a_core_reads_busy() -> None:
    core = max(os.sched_getaffinity(0))
    loop = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{core}}})\nwhile True: pass"], start_new_session=True
    )
    try:
        shares = busy_cores([core], 1.0)
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
    assert shares[core] > 0.8, shares  # the loop alone fills its core whatever else runs there


def test_the_run_samples_the_cores_its_trials_use(tmp_path: Path) -> None:
    raw = tiny_space()
    raw["hardware"].update(kind="cpu", devices=[0, 1], per_trial=1)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert trial_cores(configure(str(tmp_path / "s.yaml")).space) == {0, 1}
    raw["hardware"].update(devices=[0, 1, 2], per_trial=2)  # one partition of 2: core 2 is never used
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert trial_cores(configure(str(tmp_path / "s.yaml")).space) == {0, 1}
