"""Picking and exporting the winner of a real tune; `tune trials`; re-validation."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.conftest import copy_study
from tuner import objectives
from tuner.launching.executors import InlineExecutor
from tuner.orchestration.validate import revalidate
from tuner.results.export import build_export
from tuner.results.noise import kept
from tuner.results.pick import hypervolume_2d, pick
from tuner.results.table import trials_frame

pytestmark = pytest.mark.integration


def test_real_study_shape(real_study) -> None:
    study, _, _ = real_study
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]


def test_study_is_plain_optuna(real_study) -> None:
    """optuna-dashboard reads the same file: values, constraints and user attrs are Optuna's own."""
    _, run_dir, _ = real_study
    again = optuna.load_study(study_name="real", storage=f"sqlite:///{run_dir.root / 'study.db'}")
    done = [t for t in again.get_trials() if t.state == TrialState.COMPLETE]
    assert all(len(t.values) == 2 for t in done)
    assert all(t.constraints["server starts"] == 0 for t in done)
    assert again.metric_names == ["load.output_tok_s", "recall.effective_context"]
    assert "tuner.space" in again.user_attrs and "metrics" in done[0].user_attrs


def test_pick_max_context_and_throughput(real_study) -> None:
    study, _, _ = real_study
    by_context = pick(study, "max-context")
    assert by_context.trial.params == {"ctx-size": 2048, "parallel": 1}
    assert by_context.values[1] == 512  # recall-verified (the ladder ends at 512), not the configured 2048
    assert pick(study, "trial:0").number == 0
    with pytest.raises(Exception, match="not a complete, feasible trial"):
        pick(study, "trial:2")


def test_export_formats_replay_what_ran(real_study) -> None:
    """The export is the recorded launch: environment, interpreter, taskset pinning, every flag as
    spelled when it ran, under the memory cap it ran with (prlimit / LimitAS, and the malloc arenas
    that cap sets); only the port is the export's."""
    study, run_dir, space = real_study
    chosen = pick(study, "max-context")
    exported = build_export(study, space, chosen, port=8080)
    argv = shlex.split(exported.render("cmd"))
    original = shlex.split((run_dir.trial(chosen.number) / "command.txt").read_text())
    cap = space.server.memory_cap
    assert original[0] == argv[0] == "MALLOC_ARENA_MAX=2" and original[1] == "taskset"
    assert argv[1:4] == ["prlimit", f"--as={cap}", "--"]
    port = original.index("--port") + 1
    assert argv[4:] == [*original[1:port], "8080", *original[port + 1 :]]
    unit = exported.render("systemd")
    for needle in (
        "Environment=MALLOC_ARENA_MAX=2",
        "ExecStart=taskset",
        f"LimitAS={cap}",
        "Restart=on-failure",
        "KillMode=control-group",
        "TimeoutStopSec=",
        "recall.effective_context: 512.0",
        "--ctx-size 2048",
        "engine: llamacpp llama-cpp-python==",
    ):
        assert needle in unit
    assert "queue is unbounded" in unit and "never re-validated" in unit
    data = json.loads(exported.render("json"))
    assert data["params"] == {"ctx-size": 2048, "parallel": 1} and data["trial"] == chosen.number
    assert data["memory_cap"] == cap and data["env"] == {"MALLOC_ARENA_MAX": "2"}
    assert data["argv"] == [*original[1:port], "8080", *original[port + 1 :]]


def test_export_never_writes_a_secret(real_study, monkeypatch: pytest.MonkeyPatch) -> None:
    study, _, space = real_study
    monkeypatch.setenv("TUNER_TEST_KEY", "sk-very-secret")
    keyed = space.model_copy(update={"server": space.server.model_copy(update={"api_key_env": "TUNER_TEST_KEY"})})
    exported = build_export(study, keyed, pick(study, "max-context"))
    for fmt in ("cmd", "yaml", "systemd", "json"):
        assert "sk-very-secret" not in exported.render(fmt)
    assert "EnvironmentFile=" in exported.render("systemd")


def test_trials_table(real_study) -> None:
    study, _, _ = real_study
    frame = trials_frame(study)
    assert list(frame["state"]) == ["COMPLETE", "COMPLETE", "PRUNED"]
    assert frame.loc[2, "signature"] == "kv_cache_oom"
    assert frame.loc[1, "recall.effective_context"] == 512


def test_hypervolume() -> None:
    assert hypervolume_2d([(2, 1), (1, 2)], (0, 0)) == 3
    assert hypervolume_2d([(2, 1), (1, 2), (0.5, 0.5)], (0, 0)) == 3
    assert hypervolume_2d([(-1, 5)], (0, 0)) == 0


def test_revalidation_is_stored_and_used_by_the_pick(real_study, tmp_path: Path) -> None:
    _, shared, space = real_study
    # its own copy: the revalidation writes to the study, which the other tests read as never re-validated
    study, run_dir = copy_study(shared.root, tmp_path / "real")
    objective = objectives.load(space.objectives)
    results = revalidate(study, space, objective, run_dir, InlineExecutor(), top=1, repeats=2)
    assert len(results) == 1 and len(results[0].runs) == 2 and len(results[0].all_runs) == 3
    stored = study.user_attrs[f"revalidated.{results[0].trial}"]
    assert stored["values"] == list(results[0].mean) and len(stored["runs"]) == 3  # its own run first
    chosen = pick(study, f"trial:{results[0].trial}")
    # one number in both: a disturbed run (the study's own, taken beside other tests) is left out of each
    assert (
        chosen.revalidated and chosen.values == pytest.approx(results[0].mean) and chosen.runs == len(kept(results[0].all_runs))
    )
    assert chosen.half_widths[0] > 0 and chosen.half_widths[1] == 0  # throughput is noisy, recalled context is not
    noise = study.user_attrs["noise"]  # the reference (first enqueued config) ran too: the floor
    assert noise["reference"] == space.enqueue[0] and len(noise["runs"]) == 3 and noise["labels"][0] == "trial"
