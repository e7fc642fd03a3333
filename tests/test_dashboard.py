"""A study as optuna-dashboard 0.21 reads it (its own server and HTTP API, not our reading of
its format): feasibility from the constraints `tuner.orchestration.driver.tell` stores, and headline metrics as
flat scalar user attrs it can sort by."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import worker_port
from tuner.host.partitions import free_port
from tuner.trials import Verdict, read_trials, tell


def _study(path: Path) -> optuna.Study:
    study = optuna.create_study(study_name="dash", storage=f"sqlite:///{path}", directions=["maximize", "maximize"])
    study.set_metric_names(["load.output_tok_s", "recall.effective_context"])
    for tok_s, ttft, ok in ((120.0, 0.4, 0.0), (150.0, 7.5, 0.5)):  # the second violates the TTFT SLO
        trial = study.ask()
        metrics = {"load.output_tok_s": tok_s, "recall.effective_context": 4096.0, "load.ttft_p99": ttft}
        tell(
            study,
            trial,
            Verdict(TrialState.COMPLETE, (tok_s, 4096.0), {"load.ttft_p99 <= 5": ok, "server starts": 0.0}, {"metrics": metrics}),
        )
    trial = study.ask()
    tell(
        study, trial, Verdict(TrialState.PRUNED, constraints={"server starts": 1.0}, attrs={"signature": "kv_cache_does_not_fit"})
    )
    return study


def test_our_readers_see_names_and_feasibility(tmp_path: Path) -> None:
    study = _study(tmp_path / "s.db")
    ok, bad, pruned = read_trials(study)
    assert ok.constraints == {"load.ttft_p99 <= 5": 0.0, "server starts": 0.0}
    assert ok.feasible and not bad.feasible and not pruned.feasible
    bad = study.get_trials()[1]
    assert bad.user_attrs["load.ttft_p99"] == 7.5 and bad.user_attrs["metrics"]["load.output_tok_s"] == 150.0


@pytest.mark.integration
def test_optuna_dashboard_reads_feasibility_and_sortable_metrics(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _study(db)
    port = free_port("127.0.0.1", worker_port(34500), 400)
    exe = Path(sys.executable).with_name("optuna-dashboard")
    proc = subprocess.Popen(
        [str(exe), f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                studies = httpx.get(f"{url}/api/studies", timeout=2).json()["study_summaries"]
                break
            except (httpx.HTTPError, ValueError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.3)
        detail = httpx.get(f"{url}/api/studies/{studies[0]['study_id']}", params={"after": 0}, timeout=10).json()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    trials = {t["number"]: t for t in detail["trials"]}
    # the dashboard's rule: a trial is feasible when every value in its constraints list is <= 0
    assert trials[0]["constraints"] == [0.0, 0.0] and all(v <= 0 for v in trials[0]["constraints"])
    assert any(v > 0 for v in trials[1]["constraints"])  # infeasible: shown as such, not as feasible
    sortable = {a["key"]: a["sortable"] for a in detail["union_user_attrs"]}
    assert sortable["load.output_tok_s"] and sortable["load.ttft_p99"] and sortable["recall.effective_context"]
    attrs = {a["key"]: a["value"] for a in trials[1]["user_attrs"]}
    assert float(attrs["load.ttft_p99"]) == 7.5
