"""The driver: one function maps outcomes to trial states; a real mini-tune keeps the evidence."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

from tests.conftest import tiny_space, worker_port
from tuner import objectives
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.base.evidence import Evidence
from tuner.base.exceptions import InfrastructureError, ProbeError, StartupFailed, StartupTimeout, TeardownError
from tuner.base.level import levels_in
from tuner.launching.executors import InlineExecutor
from tuner.orchestration.deadline import Deadline
from tuner.orchestration.driver import Driver
from tuner.results.pick import candidates, pick
from tuner.trials import state_for
from tuner.trials.study import open_study

EV = Evidence(argv=("x",), elapsed_s=0.1)


@pytest.mark.parametrize(
    ("error", "state"),
    [
        (None, TrialState.COMPLETE),
        (StartupFailed("x", evidence=EV), TrialState.PRUNED),
        (StartupTimeout("x", evidence=EV), TrialState.PRUNED),
        (ProbeError("x", evidence=EV), TrialState.FAIL),
        (TeardownError("x", evidence=EV), TrialState.FAIL),
        (InfrastructureError("disk full"), TrialState.FAIL),
        (RuntimeError("bug"), TrialState.FAIL),
    ],
)
def test_state_for(error: BaseException | None, state: TrialState) -> None:
    assert state_for(error) is state


def _tune(tmp_path: Path, raw: dict, name: str, trials: int, enqueue: list[dict]) -> tuple[optuna.Study, RunDir, object]:
    space = validate(raw, "tiny.yaml")
    objective = objectives.load(space.objectives)
    run_dir = RunDir(tmp_path / name)
    study = open_study(space, objective, name=name, storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="tiny.yaml")
    for params in enqueue:
        study.enqueue_trial(params)
    executor = InlineExecutor()
    summary = Driver(space, study, objective, run_dir, executor, trials=trials).run()
    return study, run_dir, summary


@pytest.mark.integration
@pytest.mark.one_core
def test_real_mini_tune_prunes_a_real_oom_and_keeps_evidence(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    raw = tiny_space()
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [2048, 65536]},
        "batch-size": {"type": "categorical", "choices": [256, 512]},
        "ubatch-size": {"type": "categorical", "choices": [512, 128]},
    }
    raw["constraints"] = ["ubatch-size <= batch-size"]
    study, run_dir, summary = _tune(
        tmp_path,
        raw,
        "mini",
        2,
        [
            {"ctx-size": 2048, "batch-size": 256, "ubatch-size": 512},  # breaks the constraint: never launched
            {"ctx-size": 65536, "batch-size": 512, "ubatch-size": 128},  # KV does not fit under 1 GiB
            {"ctx-size": 2048, "batch-size": 512, "ubatch-size": 128},  # serves
        ],
    )
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.PRUNED, TrialState.PRUNED, TrialState.COMPLETE]
    invalid, oom, ok = trials
    assert invalid.user_attrs["invalid_combination"] == "ubatch-size <= batch-size"
    assert not run_dir.trial(invalid.number).exists()  # nothing launched

    assert oom.user_attrs["signature"] == "kv_cache_oom"
    evidence = json.loads((run_dir.trial(oom.number) / "evidence.json").read_text())
    assert evidence["returncode"] == 1 and evidence["elapsed_s"] < 10
    assert any("failed to allocate buffer for kv cache" in line["text"] for line in evidence["lines"])
    assert "insufficient memory" in (run_dir.trial(oom.number) / "server.log").read_text()
    assert oom.constraints["server starts"] > 0

    from optuna.artifacts import download_artifact, get_all_artifact_meta

    for t in (oom, ok):  # the evidence is in the study's artifact store too, attached to its trial
        metas = {m.filename: m for m in get_all_artifact_meta(t, storage=study._storage)}
        assert {"command.txt", "server.log"} <= set(metas), metas
        copy = tmp_path / f"log-{t.number}"
        download_artifact(
            artifact_store=run_dir.artifact_store(), artifact_id=metas["server.log"].artifact_id, file_path=str(copy)
        )
        assert copy.read_bytes() == (run_dir.trial(t.number) / "server.log").read_bytes()
    assert "evidence.json" in {m.filename for m in get_all_artifact_meta(oom, storage=study._storage)}
    assert ok.values[0] > 0  # output tok/s from the server's usage counts
    assert ok.user_attrs["metrics"]["capacity.context_per_request"] == 2048
    assert ok.constraints["server starts"] == 0 and ok.constraints["load.error_rate <= 0"] == 0
    outcome = json.loads((run_dir.trial(ok.number) / "outcome.json").read_text())
    assert levels_in(outcome["probes"][0]["details"])["2"].usage_reported is True
    assert "--ctx-size 2048" in (run_dir.trial(ok.number) / "command.txt").read_text()

    table = pd.read_csv(run_dir.trials_csv)
    assert list(table["state"]) == ["PRUNED", "PRUNED", "COMPLETE"]
    assert summary.stop_reason == "budget of 2 trials reached"
    assert [t.number for t in study.best_trials] == [ok.number]


@pytest.mark.integration
@pytest.mark.one_core
def test_rerun_resumes_and_a_changed_space_is_refused(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    raw = tiny_space()
    study, _, _ = _tune(tmp_path, raw, "resume", 1, [])
    assert len(study.get_trials()) == 1
    study, _, summary = _tune(tmp_path, raw, "resume", 1, [])  # budget met: nothing new
    assert len(study.get_trials()) == 1 and summary.launched == 0
    raw["parameters"]["ctx-size"]["choices"] = [4096]
    from tuner.base.exceptions import ConfigError

    with pytest.raises(ConfigError, match=r"was created with a different space \(.*: parameters\.ctx-size\.choices differ\)"):
        _tune(tmp_path, raw, "resume", 2, [])


@pytest.mark.integration
@pytest.mark.one_core
def test_a_seeded_study_resumed_continues_the_search_instead_of_replaying_it(
    tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """Run to 2 trials, then resume to 4 (a new process would open the study the same way): the
    resumed sampler proposes 2 new configs. A sampler seeded afresh replayed trials 0 and 1, which
    were then copied instead of measured; copies never count against the budget."""
    raw = tiny_space()
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [2048, 4096]},
        "parallel": {"type": "int", "low": 1, "high": 8},
        "batch-size": {"type": "categorical", "choices": [256, 512, 1024]},
    }
    raw["sampler"] = {"name": "tpe", "seed": 0, "startup_trials": 4}
    _tune(tmp_path, raw, "seeded", 2, [])
    study, _, summary = _tune(tmp_path, raw, "seeded", 4, [])
    trials = study.get_trials()
    assert summary.launched == 2 and len(trials) == 4, [(t.number, t.params, t.user_attrs.get("duplicate_of")) for t in trials]
    assert not [t.number for t in trials if "duplicate_of" in t.user_attrs], "the resumed run replayed the start-up sequence"
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 4


def test_grade_of_a_failed_start() -> None:
    """The engines' own words (read by their adapters) grade how far a start was from feasible."""
    from tuner import engines
    from tuner.trials import grade

    vllm = engines.get("vllm").classify(
        "(EngineCore pid=2512) ERROR 12-01 12:16:29 [core.py:1330] ValueError: To serve at least one request with the model's "
        "max seq "
        "len (2000000), (0.35 GiB KV cache is needed, which is larger than the available KV cache memory (0.17 GiB). Based on "
        "the "
        "available memory, the estimated maximum model length is 221888. Try increasing `gpu_memory_utilization`"
    )
    assert vllm is not None and grade(vllm.details) == pytest.approx(2000000 / 221888 - 1)
    sglang = engines.get("sglang").classify(
        "ValueError: Error: Warning: User-specified context_length (16384) is greater than the derived context_length (8192)."
    )
    assert sglang is not None and grade(sglang.details) == pytest.approx(1.0)
    assert grade({"asked": 10, "viable": 40}) == pytest.approx(3.0)
    assert grade({}) == 1.0


@pytest.mark.integration
@pytest.mark.one_core
def test_screen_skips_a_config_that_already_failed_for_real(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    from tuner.results.screen import screen_for

    raw = tiny_space()
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [2048, 65536]},
        "parallel": {"type": "int", "low": 1, "high": 2},
    }
    space = validate(raw, "tiny.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="screen", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="tiny.yaml")
    for params in ({"ctx-size": 65536, "parallel": 1}, {"ctx-size": 65536, "parallel": 2}, {"ctx-size": 2048, "parallel": 1}):
        study.enqueue_trial(params)
    run_dir = RunDir(tmp_path / "screen")
    Driver(space, study, objective, run_dir, InlineExecutor(), trials=2, screen=screen_for("llamacpp")).run()
    real_oom, skipped, served = study.get_trials()[:3]
    assert real_oom.user_attrs["signature"] == "kv_cache_oom" and not real_oom.user_attrs.get("screened")
    assert skipped.state == TrialState.PRUNED and skipped.user_attrs["screened"] == "kv_cache_oom"
    assert skipped.user_attrs["evidence"]["elapsed_s"] == 0.0 and not (run_dir.trial(skipped.number) / "server.log").exists()
    assert served.state == TrialState.COMPLETE


@pytest.mark.integration
@pytest.mark.one_core
def test_a_repeated_proposal_is_not_launched_again(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    raw = tiny_space()
    raw["parameters"]["ctx-size"]["choices"] = [2048, 4096]
    space = validate(raw, "tiny.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="dup", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="tiny.yaml")
    for ctx in (2048, 2048, 4096):
        study.enqueue_trial({"ctx-size": ctx})
    summary = Driver(space, study, objective, RunDir(tmp_path / "dup"), InlineExecutor(), trials=2).run()
    first, second, third = study.get_trials()[:3]
    assert summary.launched == 2 and third.params == {"ctx-size": 4096}
    assert second.user_attrs["duplicate_of"] == first.number and second.values == first.values
    feasible_configs = [c.number for c in candidates(study)]
    assert second.number not in feasible_configs  # one config, one point on the front: the copy is not a second one
    assert pick(study, f"trial:{second.number}").number == first.number  # asking for the copy gets its original


@pytest.mark.integration
def test_a_partition_whose_gpu_is_held_is_refused_naming_the_holder(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    """NVML is faked (no GPU here; the H200 run checks the real one): device 0 is held by pid 4242."""
    from tuner.host.devices import GpuHygiene, Holder

    raw = tiny_space()
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": 1}
    space = validate(raw, "tiny.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="held", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="tiny.yaml")
    hygiene = GpuHygiene(
        [0, 1],
        reader=lambda ids: {i: 0.0 for i in ids},
        holders=lambda ids: [Holder(d, 4242, 35700.0) for d in ids if d == 0],
        timeout=0,
        hold_grace=0,
    )
    driver = Driver(space, study, objective, RunDir(tmp_path / "held"), InlineExecutor(), trials=1, hygiene=hygiene)
    summary = driver.run()
    assert driver.refusals == [
        "partition 0: cpu 0, ports 31000+ refused: memory held before the trial by GPU 0: pid 4242 35700 MiB"
    ]
    [trial] = study.get_trials()
    assert trial.state == TrialState.COMPLETE and trial.user_attrs["partition"] == [1]

    only = dict(raw, hardware={"kind": "cpu", "devices": [0], "per_trial": 1})
    space = validate(only, "tiny.yaml")
    study = open_study(space, objective, name="held0", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="tiny.yaml")
    summary = Driver(space, study, objective, RunDir(tmp_path / "held0"), InlineExecutor(), trials=1, hygiene=hygiene).run()
    assert summary.launched == 0 and "pid 4242" in summary.stop_reason


@pytest.mark.integration
def test_a_smaller_trial_uses_the_partition_a_larger_one_waits_beside(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    """tp 1 and 2 mixed on two devices, as on the x2 night (here llama-server threads on two
    cores, through `tune run` and Ray): trial 0 takes core 0, trial 1 needs both and waits, and
    trial 2 (one core) starts on core 1 beside trial 0 instead of leaving it idle; trial 1 then
    gets both cores, once, and nothing overtakes it again."""
    import subprocess
    import sys

    import yaml

    from tuner.results.table import launched

    raw = tiny_space(name="mixed")
    raw["server"]["flags"].pop("threads")
    raw["parameters"] = {
        "threads": {"type": "categorical", "choices": [1, 2]},
        "ctx-size": {"type": "categorical", "choices": [2048, 3072, 4096]},
    }
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": "threads"}
    raw["enqueue"] = [
        {"threads": 1, "ctx-size": 2048},
        {"threads": 2, "ctx-size": 2048},
        {"threads": 1, "ctx-size": 3072},
        {"threads": 1, "ctx-size": 4096},
    ]
    raw["budget"] = {"trials": 4}
    (tmp_path / "mixed.yaml").write_text(yaml.safe_dump(raw))
    run = subprocess.run(
        [sys.executable, "-m", "tuner", "run", "--space", "mixed.yaml", "--study", "mixed"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    study = optuna.load_study(study_name="mixed", storage=f"sqlite:///{tmp_path / 'runs' / 'mixed' / 'study.db'}")
    first, large, beside, last = study.get_trials()
    assert [t.state for t in (first, large, beside, last)] == [TrialState.COMPLETE] * 4, [
        t.user_attrs.get("error") for t in study.trials
    ]
    assert (first.user_attrs["partition"], large.user_attrs["partition"], beside.user_attrs["partition"]) == ([0], [0, 1], [1])
    assert launched(beside) < first.datetime_complete  # side by side: core 1 did not wait for trial 0
    assert launched(large) >= max(first.datetime_complete, beside.datetime_complete)  # both cores, once both were free
    assert launched(last) >= large.datetime_complete  # passed once (one other partition): trial 3 did not pass it again


def test_recovery_tells_a_trial_that_ran_from_one_that_only_waited(tmp_path: Path) -> None:
    """The x2 night's kill -9: trial 1 (tp 2) held both GPUs, trial 2 (tp 2) was asked and
    waited for them; both were RUNNING in the study. Only the first ran; both are re-queued."""
    from tuner.orchestration.driver import fail_interrupted

    study = optuna.create_study()
    ran, waited = study.ask({"tp": optuna.distributions.CategoricalDistribution([1, 2])}), study.ask()
    ran.set_user_attr("partition", [0, 1])
    waited.suggest_categorical("tp", [1, 2])
    notes = fail_interrupted(study)
    assert notes == [
        "trial 0 was interrupted: recorded as FAIL, params re-queued",
        "trial 1 was asked, never launched: recorded as FAIL, params re-queued",
    ]
    first, second = study.trials[:2]
    assert first.user_attrs["error"] == "interrupted: the tuner stopped while this trial ran"
    assert second.user_attrs["error"] == "asked but never launched: the tuner stopped"


def test_recovery_keeps_what_an_interrupted_trial_left_on_its_node(tmp_path: Path) -> None:
    """A driver killed mid-trial on a cluster: the trial's files stayed in its node's temp folder.
    The next driver (another folder) takes them there, writes them into its runs/ and keeps them
    in the study's artifact store before it records the trial FAIL; optuna-dashboard serves them."""
    from optuna.artifacts import get_all_artifact_meta

    from tuner.launching.executors import LEFTOVER_PREFIX, MARKER, leftovers
    from tuner.orchestration.driver import fail_interrupted

    node_tmp = tmp_path / "node-tmp"
    for key, trial in (("night", 0), ("other-study", 0)):
        folder = node_tmp / f"{LEFTOVER_PREFIX}{key}"
        folder.mkdir(parents=True)
        (folder / MARKER).write_text(json.dumps({"key": key, "trial": str(trial)}))
        (folder / "server.log").write_text(f"{key}: llama_server: model loaded\n")
    left = leftovers("night", node_tmp)
    assert list(left) == [0] and left[0] == {"server.log": b"night: llama_server: model loaded\n"}
    assert not (node_tmp / f"{LEFTOVER_PREFIX}night").exists() and (node_tmp / f"{LEFTOVER_PREFIX}other-study").exists()

    db = tmp_path / "s.db"
    study = optuna.create_study(study_name="night", storage=f"sqlite:///{db}")
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 3)})
    trial.set_user_attr("partition", [0])
    run_dir = RunDir(tmp_path / "other-folder" / "runs" / "night")
    assert fail_interrupted(study, run_dir, left) == ["trial 0 was interrupted: recorded as FAIL, params re-queued"]
    assert (run_dir.trial(0) / "server.log").read_text() == "night: llama_server: model loaded\n"
    frozen = study.trials[0]
    assert frozen.state == TrialState.FAIL and [m.filename for m in get_all_artifact_meta(frozen, storage=study._storage)] == [
        "server.log"
    ]

    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from tuner.host.partitions import free_port

    port = free_port("127.0.0.1", worker_port(34900), 400)
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("optuna-dashboard")),
            f"sqlite:///{db}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--artifact-dir",
            str(run_dir.artifacts),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 30
        while True:
            try:
                study_id = httpx.get(f"{url}/api/studies", timeout=2).json()["study_summaries"][0]["study_id"]
                break
            except (httpx.HTTPError, ValueError, IndexError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.3)
        shown = httpx.get(f"{url}/api/studies/{study_id}", params={"after": 0}, timeout=10).json()["trials"][0]
        meta = next(a for a in shown["artifacts"] if a["filename"] == "server.log")
        body = httpx.get(f"{url}/artifacts/{study_id}/{shown['trial_id']}/{meta['artifact_id']}", timeout=10)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    assert body.status_code == 200 and body.text == "night: llama_server: model loaded\n"


class _Timed:
    """An executor double for the scheduling rule at the user's 8-GPU shape (no engine runs): each
    trial ends after ``seconds`` as a failed start (pruned, so it counts toward the budget)."""

    def __init__(self, max_parallel: int, seconds: float) -> None:
        self.max_parallel, self.seconds = max_parallel, seconds

    def submit(self, space, params, trial_dir, partition, ledger=None):
        import threading
        from concurrent.futures import Future

        future: Future = Future()
        failed = StartupFailed(
            "no engine here", evidence=Evidence(argv=("engine",), elapsed_s=self.seconds, signature="scripted")
        )
        threading.Timer(self.seconds, future.set_exception, args=(failed,)).start()
        return future

    def cancel(self, future, *, force: bool) -> None:
        pass

    def shutdown(self) -> None:
        pass


def test_on_eight_gpus_a_tp8_trial_is_passed_at_most_once(tmp_path: Path) -> None:
    """b300's shape: tp 4 and 8 on 8 GPUs, two tp-4 partitions at most. While a tp-8 trial waits, one
    tp-4 trial may take the free half; then nothing else starts before it, however many tp-4 trials
    the sampler asks for; no GPU ever holds two trials."""
    from tuner.results.table import launched

    raw = tiny_space(name="eight")
    sizes = [4, 8, 4, 4, 4, 8, 4, 4, 8, 4]
    raw["parameters"] = {
        "tp": {"type": "categorical", "choices": [4, 8]},
        "ctx-size": {"type": "categorical", "choices": [1024 * (i + 1) for i in range(len(sizes))]},
    }
    raw["enqueue"] = [{"tp": s, "ctx-size": 1024 * (i + 1)} for i, s in enumerate(sizes)]
    raw["hardware"] = {"kind": "gpu", "devices": list(range(8)), "per_trial": "tp"}
    raw["budget"] = {"trials": len(sizes)}
    space = validate(raw, "eight.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="eight", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="eight.yaml")
    summary = Driver(
        space, study, objective, RunDir(tmp_path / "eight"), _Timed(max_parallel=2, seconds=1.0), trials=len(sizes)
    ).run()
    trials = study.get_trials()
    assert summary.launched == len(sizes) and [len(t.user_attrs["partition"]) for t in trials] == sizes
    for t in trials:
        if len(t.user_attrs["partition"]) == 8:
            passed = [o.number for o in trials if o.number > t.number and launched(o) < launched(t)]
            assert len(passed) <= 1, (t.number, passed)
    for gpu in range(8):
        spans = sorted((launched(t), t.datetime_complete) for t in trials if gpu in t.user_attrs["partition"])
        assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans)), gpu
    assert launched(trials[2]) < trials[0].datetime_complete  # the free half did not idle while trial 1 waited


def test_an_unwritable_artifact_store_costs_no_verdict(tmp_path: Path) -> None:
    """The store on a path that cannot be written (a shared mount gone read-only): the trial is
    still told, its files stay in runs/, and a warning says so."""
    from tuner.trials import Verdict, tell

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    run_dir = RunDir(tmp_path / "runs" / "s", artifact_dir=blocker / "artifacts")
    study = optuna.create_study()
    trial = study.ask()
    run_dir.trial(0).mkdir(parents=True)
    (run_dir.trial(0) / "server.log").write_text("log\n")
    tell(study, trial, Verdict(TrialState.COMPLETE, (1.0,)), run_dir=run_dir)
    assert study.trials[0].state == TrialState.COMPLETE and (run_dir.trial(0) / "server.log").is_file()


def _deadline_run(tmp_path: Path, deadline: Deadline, trials: int = 6) -> tuple[Any, Any]:
    import time

    raw = tiny_space(name="due")
    raw["parameters"] = {"ctx-size": {"type": "categorical", "choices": [1024 * (i + 1) for i in range(trials)]}}
    raw["enqueue"] = [{"ctx-size": 1024 * (i + 1)} for i in range(trials)]
    space = validate(raw, "due.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="due", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="due.yaml")
    deadline.at += time.monotonic()
    driver = Driver(
        space, study, objective, RunDir(tmp_path / "due"), _Timed(max_parallel=1, seconds=0.4), trials=trials, deadline=deadline
    )
    return driver.run(), deadline


def test_a_deadline_launches_a_trial_only_while_it_and_the_end_fit(tmp_path: Path) -> None:
    """A first answer (2 trials) is launched with no time kept for the end; then a trial must
    leave room for the end's runs too, here 1,000 of them: none more fits in a minute, however
    fast or slow the machine. A deadline already past launches nothing."""
    summary, deadline = _deadline_run(tmp_path, Deadline(at=60.0, seconds=60.0, estimate_s=0.4, end_launches=1000))
    assert summary.launched == 2 and deadline.longest_s >= 0.4
    assert summary.stop_reason.startswith("the deadline (1m00s, budget.deadline) leaves no room for another trial")
    (tmp_path / "late").mkdir()
    late, _ = _deadline_run(tmp_path / "late", Deadline(at=-1.0, seconds=60.0, estimate_s=0.4))
    assert late.launched == 0 and late.stop_reason.startswith("the deadline (1m00s, budget.deadline)")


class _Slow(_Timed):
    """Trials that take ``seconds``, longer than the run's deadline leaves them; records the
    ``budget.trial_timeout`` each was launched with (what its probes' clock counts down from)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(max_parallel=1, seconds=seconds)
        self.limits: list[float | None] = []

    def submit(self, space, params, trial_dir, partition, ledger=None):
        self.limits.append(space.budget.trial_timeout)
        future: Future = Future()
        ended = StartupFailed("no engine here", evidence=Evidence(argv=("engine",), elapsed_s=self.seconds, signature="scripted"))

        def end() -> None:
            with contextlib.suppress(InvalidStateError):  # cancelled before: it has ended
                future.set_exception(ended)

        timer = threading.Timer(self.seconds, end)
        timer.daemon = True  # a run cut short leaves it nothing to wait for
        timer.start()
        return future

    def cancel(self, future, *, force: bool) -> None:  # a forced cancel ends the run at once
        if force and not future.done():
            future.set_exception(InfrastructureError("cancelled"))


def test_a_trial_is_stopped_where_the_deadline_comes_and_its_config_queued_for_the_next_run(tmp_path: Path) -> None:
    """A deadline 2 s away and a first trial estimated at 0.1 s: it launches, with what is left of
    the 2 s as its trial_timeout (its probes' clock), would take 20 s, and is stopped at the
    deadline: recorded as the run's doing, not the config's (no trial_timeout signature), and its
    params queued again. The run ends long before the trial would have, and nothing else launches."""
    import time

    raw = tiny_space(name="due")
    raw["enqueue"] = [{"ctx-size": 2048}]
    space = validate(raw, "due.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="due", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="due.yaml")
    executor = _Slow(seconds=20.0)
    began = time.monotonic()
    deadline = Deadline(at=began + 2.0, seconds=2.0, estimate_s=0.1)
    driver = Driver(space, study, objective, RunDir(tmp_path / "due"), executor, trials=3, deadline=deadline)
    summary = driver.run()
    assert time.monotonic() - began < 15.0 and summary.launched == 1, summary
    assert len(executor.limits) == 1 and executor.limits[0] is not None and 0 < executor.limits[0] <= 2.0
    stopped, queued = study.get_trials()
    assert stopped.state == TrialState.FAIL and "what budget.deadline left it" in str(stopped.user_attrs), stopped.user_attrs
    assert "trial_timeout" not in str(stopped.user_attrs)
    assert queued.state == TrialState.WAITING and queued.system_attrs["fixed_params"] == stopped.params
    assert summary.stop_reason.startswith("the deadline (2s, budget.deadline) leaves no room"), summary.stop_reason


def test_a_deadline_with_room_leaves_the_trial_budget_in_charge(tmp_path: Path) -> None:
    summary, _ = _deadline_run(tmp_path, Deadline(at=600.0, seconds=600.0, estimate_s=0.4), trials=3)
    assert summary.launched == 3 and summary.stop_reason == "budget of 3 trials reached"


def test_a_deadline_counts_the_end_runs_and_parallel_trials() -> None:
    due = Deadline(at=100.0, seconds=100.0, estimate_s=10.0, end_launches=3, parallel=2)
    assert due.end_s() == 20.0  # 3 runs, 2 at a time: 2 rounds of 10 s
    assert due.room_for_trial(2, now=70.0) and not due.room_for_trial(2, now=70.1)  # 10 + 20 s must be left
    assert due.room_for_trial(1, now=89.0)  # before a first answer (2 trials) no time is kept for the end
    assert due.room_for_reference(now=50.0) and not due.room_for_reference(now=50.1)  # the reference, 2 trials, the end
    due.observe(25.0)
    assert due.launch_s == 25.0 and due.launches_left(now=40.0) == 4  # 60 s: 2 rounds of 25 s, 2 at a time


class _TermedInline(_Timed):
    """The inline executor's shape (the trial runs in the driver's thread) where `timeout`'s SIGTERM
    reaches the second trial: the handler's SystemExit leaves ``submit`` itself."""

    def __init__(self) -> None:
        super().__init__(max_parallel=1, seconds=0.0)
        self.calls = 0

    def submit(self, space, params, trial_dir, partition, ledger=None):
        self.calls += 1
        if self.calls == 2:
            raise SystemExit(143)
        return super().submit(space, params, trial_dir, partition, ledger)


def test_a_sigterm_inside_an_inline_trial_records_it_once_and_requeues_it(tmp_path: Path) -> None:
    """On the H100 (2026-12-05) a SIGTERM during an inline trial recorded it as interrupted, then
    told it again as "never launched": UpdateFinishedTrialError, the run's end (trials.csv) lost.
    The trial is recorded once, its config queued again, and the SystemExit goes on."""
    raw = tiny_space(name="termed")
    raw["parameters"] = {"ctx-size": {"type": "categorical", "choices": [1024, 2048, 3072]}}
    raw["enqueue"] = [{"ctx-size": 1024}, {"ctx-size": 2048}, {"ctx-size": 3072}]
    space = validate(raw, "termed.yaml")
    objective = objectives.load(space.objectives)
    study = open_study(space, objective, name="termed", storage=f"sqlite:///{tmp_path / 'db.sqlite'}", source="termed.yaml")
    run_dir = RunDir(tmp_path / "termed")
    with pytest.raises(SystemExit):
        Driver(space, study, objective, run_dir, _TermedInline(), trials=3).run()
    trials = study.get_trials()
    assert [t.state for t in trials[:2]] == [TrialState.PRUNED, TrialState.FAIL]
    assert "interrupted: SystemExit" in trials[1].user_attrs["error"]
    again = [t for t in trials if t.state == TrialState.WAITING and "requeued_from" in t.user_attrs]
    assert [(t.system_attrs["fixed_params"], t.user_attrs.get("requeued_from")) for t in again] == [({"ctx-size": 2048}, 1)]
    assert run_dir.trials_csv.is_file()
