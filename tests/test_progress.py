"""Live phases of a running trial: the worker's own (launching, load level, recall rung, ...) and,
while launching, the engine's startup lines (the committed H200 logs), as one labelled line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import tiny_space
from tuner import engines
from tuner.base import progress

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


@pytest.mark.parametrize(
    ("engine", "fixture", "phase"), [("vllm", "h200-vllm", "API server up"), ("sglang", "h200-sglang", "API server up")]
)
def test_launching_shows_the_engines_last_startup_phase(engine: str, fixture: str, phase: str, tmp_path: Path) -> None:
    log = (FIXTURES / fixture / "trials" / "0" / "server.log").read_text(errors="replace")
    phases = engines.get(engine).startup_phases
    (tmp_path / "phase.json").write_text(json.dumps({"label": "launching", "at": time.time() - 42}))
    cut = log[: log.find("KV cache") if engine == "vllm" else log.find("KV Cache is allocated")]  # the log mid-start
    (tmp_path / "server.log").write_text(cut)
    assert progress.describe(tmp_path, phases).startswith("launching: weights loaded")
    (tmp_path / "server.log").write_text(log)
    line = progress.describe(tmp_path, phases)
    assert line.startswith(f"launching: {phase} (for 4") and line.endswith("s)")


def test_sglang_0517_graph_capture_is_named(tmp_path: Path) -> None:
    """SGLang 0.5.17 says "Capture target prefill CUDA graph begin" (44 s of that start on the H200)."""
    log = (FIXTURES / "h200-sglang" / "trials" / "0" / "server.log").read_text(errors="replace")
    phases = engines.get("sglang").startup_phases
    (tmp_path / "phase.json").write_text(json.dumps({"label": "launching", "at": time.time()}))
    (tmp_path / "server.log").write_text(log[: log.find("Capture target prefill CUDA graph end")])
    assert progress.describe(tmp_path, phases).startswith("launching: capturing graphs")
    (tmp_path / "server.log").write_text(log[: log.find("max_total_num_tokens=")])
    assert progress.describe(tmp_path, phases).startswith("launching: graphs captured")


def test_outside_a_trial_reporting_does_nothing_and_unknown_is_starting(tmp_path: Path) -> None:
    progress.report("nobody listens")
    assert progress.describe(tmp_path) == "starting"
    with progress.bind(tmp_path):
        progress.report("recall: rung 2/3, 2,048 tokens")
    assert progress.describe(tmp_path).startswith("recall: rung 2/3, 2,048 tokens (for ")


@pytest.mark.integration
@pytest.mark.one_core
def test_a_run_shows_each_trials_phases_between_trial_lines(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    from tuner import objectives
    from tuner.app.prepare import validate
    from tuner.base.artifacts import RunDir
    from tuner.launching.executors import InlineExecutor
    from tuner.orchestration.driver import Driver
    from tuner.trials.study import open_study

    raw = tiny_space(name="phases")
    raw["probes"]["load"].update(duration=3, max_duration=3)
    raw["probes"]["recall"] = {"lengths": [256, 512]}
    space = validate(raw, "phases.yaml")
    objective = objectives.load(space.objectives)
    run_dir = RunDir(tmp_path / "phases")
    run_dir.root.mkdir()
    study = open_study(space, objective, name="phases", storage=run_dir.db_url, source="phases.yaml")
    executor = InlineExecutor()
    seen: list[str] = []
    # the inline executor runs the trial inside submit: watch its phase file from a thread instead
    import threading

    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            line = progress.describe(run_dir.trial(0), engines.get("llamacpp").startup_phases)
            if not seen or seen[-1] != line.rsplit(" (for", 1)[0]:
                seen.append(line.rsplit(" (for", 1)[0])
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        Driver(space, study, objective, run_dir, executor, trials=1).run()
    finally:
        stop.set()
        thread.join()
    assert any(s.startswith("load: 2 concurrent clients") for s in seen), seen
    assert any(s.startswith("recall: rung") for s in seen) and seen[-1] == "stopping the server", seen


def test_on_a_terminal_the_phase_line_stays_within_its_width_and_is_erased_before_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rewritten in place means within the terminal: padded to 200 columns, each rewrite wrapped in
    a 100-column tmux pane and left one more copy of the line on the screen (issue 40)."""
    from tuner.cli._run import PhaseLine
    from tuner.host.partitions import Partition

    monkeypatch.setenv("COLUMNS", "100")
    running = []
    for n in range(4):  # four trials at once: a line far wider than the terminal
        (tmp_path / str(n)).mkdir()
        with progress.bind(tmp_path / str(n)):
            progress.report("load: 4 concurrent clients, window 4-8s")
        running.append((n, Partition(n, "cpu", (n,), 31000 + 10 * n), tmp_path / str(n)))
    phase = PhaseLine(())
    phase.tty = True
    printed: list[str] = []
    say = phase.before(printed.append)
    phase(running)
    first = capsys.readouterr().err
    assert first.startswith("\r") and first.endswith("\x1b[K"), repr(first)
    assert "trial 0 [cpu 0]: load: 4 concurrent clients" in first and len(first) - len("\r\x1b[K") == 99
    say("[1/8] trial 0 COMPLETE")
    assert capsys.readouterr().err == "\r\x1b[K" and printed == ["[1/8] trial 0 COMPLETE"]  # erased, then printed
    say("reference run 1")
    assert capsys.readouterr().err == "" and printed[-1] == "reference run 1"  # nothing shown: nothing to erase
