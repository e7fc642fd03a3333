"""A trial whose real llama-server dies while it is probed is a config that crashed under load:
PRUNED with evidence (how it ended, the first failed request, when), never a FAIL or a
COMPLETE without evidence."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import tiny_space, worker_core
from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.base.exceptions import CrashedUnderLoad
from tuner.host.fingerprint import HostFingerprint
from tuner.host.ledger import Ledger
from tuner.host.partitions import make_partitions
from tuner.orchestration.driver import record
from tuner.serving.trial import run_trial

pytestmark = [pytest.mark.integration, pytest.mark.one_core]  # each a 1-thread server on worker_core()


def _kill_when_probed(ledger: Ledger, log_dir: Path, after_s: float) -> threading.Thread:
    """SIGKILL the server's leader once it has answered a probe request (llama.cpp logs each slot it launches)."""

    def kill() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            log = log_dir / "server.log"
            if log.exists() and log.read_text().count("launch_slot_") >= 2 and ledger.entries():
                time.sleep(after_s)
                os.kill(ledger.entries()[0].pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("after_s", [0.0, 1.0])  # while prompts are calibrated / inside a level's window
def test_server_killed_mid_probe_is_pruned_with_evidence(
    tmp_path: Path, llama_server: Path, smollm2: Path, after_s: float
) -> None:
    raw = tiny_space()
    raw["probes"]["load"].update(duration=3, max_duration=4, output_tokens=64)
    space = validate(raw, "tiny.yaml")
    ledger = Ledger(tmp_path / "servers")
    trial_dir = tmp_path / "trials" / "0"
    killer = _kill_when_probed(ledger, trial_dir, after_s)
    [partition] = make_partitions("cpu", [worker_core()], 1)

    with pytest.raises(CrashedUnderLoad) as info:
        run_trial(space, {"ctx-size": 2048}, trial_dir, partition, ledger=ledger)
    killer.join(1)

    evidence = info.value.evidence
    assert evidence.signal == "SIGKILL" and evidence.returncode is None
    assert evidence.details["stopped_by_tuner"] is False
    assert evidence.details["first_error"]  # the first failed request, in the server's or httpx's words
    assert evidence.details["probe"] == "load"
    assert 0 < evidence.details["exited_after_s"] < 30
    assert "died under load in load" in str(info.value)
    assert "first failed request" in evidence.describe()  # llama.cpp prints no exception: the tuner says what it saw

    # the verdict: PRUNED (the sampler learns), evidence kept on the trial and on disk
    objective = objectives.load(space.objectives)
    study = optuna.create_study(directions=objective.directions)
    trial = study.ask()
    state, _, _ = record(study, trial, RunDir(tmp_path), objective, error=info.value)
    assert state == TrialState.PRUNED
    assert study.trials[0].user_attrs["signature"] == evidence.signature
    assert json.loads((tmp_path / "trials" / "0" / "evidence.json").read_text())["signal"] == "SIGKILL"


def test_a_server_that_requires_an_api_key_is_ready_and_measured(
    tmp_path: Path, llama_server: Path, smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """server.api_key_env: readiness, capacity and probes send the key; it is nowhere on disk."""
    secret = "sk-tuner-test-5f3a9c"
    monkeypatch.setenv("TUNER_TEST_KEY", secret)
    raw = tiny_space()
    raw["server"]["api_key_env"] = "TUNER_TEST_KEY"
    raw["server"]["startup_timeout"] = "20s"
    space = validate(raw, "tiny.yaml")
    [partition] = make_partitions("cpu", [worker_core()], 1)
    began = time.monotonic()
    outcome = run_trial(space, {"ctx-size": 2048}, tmp_path / "trials" / "0", partition)
    assert time.monotonic() - began < 20, "readiness did not send the key (waited for the startup timeout)"
    assert outcome.metrics()["load.output_tok_s"] > 0
    # what it ran on, calibrated on the server's core before the server started (tests/test_fingerprint.py)
    host = HostFingerprint.from_dict(outcome.host)
    assert host is not None and host.name == socket.gethostname() and host.cores == partition.server_cpus
    assert host.loop_ms is not None and host.loop_ms > 0
    assert json.loads((tmp_path / "trials" / "0" / "host.json").read_text()) == outcome.host
    for path in (tmp_path / "trials" / "0").iterdir():
        assert secret not in path.read_text(), f"the API key leaked into {path.name}"


def test_a_port_taken_between_the_check_and_the_bind_is_started_again_on_another(
    tmp_path: Path, llama_server: Path, smollm2: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program (a second tuner's trial) takes the port after the partition found it free:
    the real llama-server cannot bind it, and the trial starts again on the block's next free
    port instead of recording the config as infeasible; the failed start's log is kept."""
    import socket

    from tuner.host import partitions
    from tuner.serving.trial import serve

    space = validate(tiny_space(), "tiny.yaml")
    [partition] = make_partitions("cpu", [worker_core()], 1)
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        real = partitions.free_port
        calls: list[int] = []

        def racing(host: str, base: int, span: int) -> int:  # free when looked at, taken when bound
            calls.append(base)
            return taken if len(calls) == 1 else real(host, base, span)

        monkeypatch.setattr(partitions, "free_port", racing)
        trial_dir = tmp_path / "trials" / "0"
        with serve(space, {"ctx-size": 2048}, trial_dir, partition, ledger=Ledger(tmp_path / "servers")) as served:
            assert served.server.port != taken
            assert f"--port {served.server.port}" in (trial_dir / "command.txt").read_text()
        kept = trial_dir / f"server.port-{taken}-taken.log"
        assert "couldn't bind HTTP server socket" in kept.read_text()
        # then the block's first free port; another worker's server may take that one too before
        # the bind (ci16), and every port taken is a start again with its log kept
        assert len(calls) >= 2 and calls[1] == partition.port_base
        retried = sorted(trial_dir.glob("server.port-*-taken.log"))
        assert len(retried) == len(calls) - 1, retried
    finally:
        squatter.close()


def test_the_probes_see_the_trial_s_limit_less_the_stop(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A probe asks how long the trial has left (tuner.base.clock) before a long step (an SLO hold):
    run_trial binds ``budget.trial_timeout`` less what the server's stop needs, and nothing outside it."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from tuner import probes
    from tuner.base import clock
    from tuner.serving import trial
    from tuner.space import SearchSpace

    seen: list[float | None] = []

    class Asked(Exception):
        pass

    class Probe:
        name = "asks"

        def see(self, earlier: object) -> None:
            pass

        def run(self, handle: object) -> None:
            seen.append(clock.left())
            raise Asked

    @contextmanager
    def served(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        yield SimpleNamespace(handle=None, server=SimpleNamespace(died=lambda: False))

    monkeypatch.setattr(trial, "serve", served)
    monkeypatch.setattr(probes, "from_space", lambda space: [Probe()])
    partition = make_partitions("cpu", [worker_core()], 1)[0]
    for limit in (600, None):
        space = SearchSpace.model_validate(tiny_space(budget={"trials": 1, "trial_timeout": limit}))
        with pytest.raises(Asked):
            run_trial(space, {"ctx-size": 2048}, tmp_path, partition)
    assert seen[1] is None and 600 - trial.STOP_S - 5 < (seen[0] or 0) <= 600 - trial.STOP_S
    assert clock.left() is None
