"""The `tune` command line, run as a user would (a subprocess), on real logs and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import FIXTURES, ROOT, tiny_space

LOGS = FIXTURES / "llamacpp"


def tune(*args: str, stdin: str | None = None, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args], capture_output=True, text=True, input=stdin, cwd=cwd, timeout=120, env=env
    )


def test_diagnose_real_llamacpp_oom_log() -> None:
    out = tune("diagnose", "--engine", "llamacpp", "--log", str(LOGS / "kv_oom.log"))
    assert out.returncode == 0, out.stderr
    assert "signature: kv_cache_oom" in out.stdout
    assert "failed to allocate buffer for kv cache" in out.stdout


def test_diagnose_json_and_capacity() -> None:
    out = tune("diagnose", "--engine", "llamacpp", "--json", str(LOGS / "ok_startup.log"))
    data = json.loads(out.stdout)
    assert data["signature"] is None
    assert data["capacity"]["context_per_request"] == 2048
    assert data["capacity"]["max_running_requests"] == 2


def test_diagnose_from_stdin_vllm() -> None:
    text = (
        "ValueError: To serve at least one request with the model's max seq len (2000000), (244.14 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (27.07 GiB). Based on the available memory, "
        "the estimated maximum model length is 221776.\nRuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    out = tune("diagnose", "--engine", "vllm", "-", stdin=text)
    assert "signature: max_model_len_exceeds_kv" in out.stdout
    assert "estimated_max_model_len = 221776" in out.stdout


def test_diagnose_sglang_json() -> None:
    out = tune(
        "diagnose",
        "--engine",
        "sglang",
        "--json",
        "-",
        stdin="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
    )
    assert json.loads(out.stdout)["signature"] == "not_enough_memory"


def test_diagnose_unknown_engine_exit_2() -> None:
    out = tune("diagnose", "--engine", "tgi", str(LOGS / "kv_oom.log"))
    assert out.returncode == 2
    assert out.stderr.strip() == "error: engine 'tgi' is not registered; available: ['llamacpp', 'sglang', 'vllm']"


def test_run_with_a_bad_space_is_one_line_exit_2_and_launches_nothing(tmp_path: Path) -> None:
    raw = tiny_space()
    raw["parameters"]["ctx-size"] = {"type": "int", "low": 9000, "high": 10}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    out = tune("run", "--space", str(bad), "--study", "x", cwd=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [f"error: {bad}: parameters.ctx-size: low (9000) > high (10)"]
    assert not (tmp_path / "runs").exists()


def test_run_bad_timeout_exit_2(tmp_path: Path) -> None:
    out = tune("run", "--study", "x", "--timeout", "soon", cwd=tmp_path)
    assert out.returncode == 2
    assert "--timeout: not a duration" in out.stderr
    assert not (tmp_path / "runs").exists()


def test_status_of_a_missing_study(tmp_path: Path) -> None:
    out = tune("status", "--study", "nope", cwd=tmp_path)
    assert out.returncode == 2
    assert "no study 'nope'" in out.stderr


def _fixture_db(tmp_path: Path) -> Path:
    import shutil

    db = tmp_path / "study.db"
    shutil.copy(FIXTURES / "gpu" / "h200-vllm" / "study.db", db)
    return db


def _one_line(out: subprocess.CompletedProcess[str], code: int, starts: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == code and len(lines) == 1, out.stderr
    assert lines[0].startswith(starts), lines[0]


def test_a_corrupted_study_db_is_one_line(tmp_path: Path) -> None:
    db = _fixture_db(tmp_path)
    with open(db, "r+b") as f:
        f.seek(4096 * 2)
        f.write(b"\xff" * 8192)
    out = tune("status", "--study", "h200-vllm", "--storage", f"sqlite:///{db}", cwd=tmp_path)
    _one_line(out, 2, f"error: cannot open storage sqlite:///{db}: DatabaseError: database disk image is malformed")


def test_a_read_only_study_storage_is_one_line(tmp_path: Path) -> None:
    """Root ignores file modes; a read-only SQLite URI refuses writes for everyone."""
    db = _fixture_db(tmp_path)
    raw = tiny_space()
    space = tmp_path / "t.yaml"
    space.write_text(yaml.safe_dump(raw))
    out = tune(
        "run",
        "--space",
        str(space),
        "--study",
        "h200-vllm",
        "--storage",
        f"sqlite:///file:{db}?mode=ro&uri=true",
        "--force",
        cwd=tmp_path,
    )
    _one_line(out, 1, "error: the study storage failed: OperationalError: attempt to write a readonly database")


def test_an_unwritable_runs_dir_is_one_line(tmp_path: Path) -> None:
    env = {**__import__("os").environ, "TUNER_RUNS": "/proc/tuner-runs"}
    out = tune("run", "--trials", "1", cwd=tmp_path, env=env)
    _one_line(out, 1, "error: No such file or directory: /proc/tuner-runs")


def test_a_typo_in_the_study_name_never_shows_another_study(tmp_path: Path) -> None:
    db = _fixture_db(tmp_path)
    out = tune("status", "--study", "h200-vlm", "--storage", f"sqlite:///{db}", cwd=tmp_path)
    _one_line(out, 2, "error: study 'h200-vlm' not found in ")
    assert "it holds: h200-vllm" in out.stderr
    labelled = tune("status", "--study", "x", "--storage", f"mine=sqlite:///{db}", cwd=tmp_path)  # LABEL=URL: a label, not a name
    assert labelled.returncode == 0, labelled.stderr


def test_limits_refuses_negative_numbers() -> None:
    _one_line(tune("limits", "--kv-tokens", "-5"), 2, "error: --kv-tokens: needs a positive number, got -5")


def test_pareto_refuses_a_metric_no_trial_has(tmp_path: Path) -> None:
    db = _fixture_db(tmp_path)
    out = tune("pareto", "--study", f"h200-vllm=sqlite:///{db}", "--x", "load.nope", "--out", str(tmp_path / "p"), cwd=tmp_path)
    _one_line(out, 2, "error: --x: no trial of study 'h200-vllm' has metric 'load.nope' (e.g. ")
    assert not list(tmp_path.glob("p.*")), "plots were written for a metric that does not exist"


def test_provisioning_progress_is_one_plain_line_when_piped() -> None:
    code = "from tuner.cli._common import progress_bar\nfor i in range(5): progress_bar(i / 4, f'building step {i}')\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0 and "\r" not in out.stderr and "\x1b" not in out.stderr, repr(out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("100%") and lines[0].endswith("building step 4"), lines


def test_no_command_prints_or_writes_a_storage_password(tmp_path: Path) -> None:
    """An unreachable PostgreSQL URL that holds a password, through every study command: each
    answers in one line with the password masked, and nothing under runs/ holds it."""
    secret = "S3cret-PW-9f2"
    url = f"postgresql+psycopg://alice:{secret}@127.0.0.1:9/tuner?connect_timeout=2"
    space = tmp_path / "tiny.yaml"
    space.write_text(yaml.safe_dump(tiny_space()))
    commands = [
        ("run", "--space", str(space), "--study", "s", "--storage", url),
        ("status", "--study", "s", "--storage", url),
        ("trials", "--study", "s", "--storage", url),
        ("report", "--study", "s", "--storage", url),
        ("export", "--study", "s", "--storage", url),
        ("pareto", "--study", "s", "--storage", url),
        ("status", "--study", f"s={url}"),
    ]
    for args in commands:
        out = tune(*args, cwd=tmp_path)
        assert out.returncode in (1, 2), (args, out.stdout, out.stderr)
        assert secret not in out.stdout + out.stderr, (args, out.stdout, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)
        assert args[0] == "run" or "alice:***@" in out.stderr, (args, out.stderr)  # shown masked where a command names it
    for path in (tmp_path / "runs").rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path


def test_version() -> None:
    import importlib.metadata

    out = tune("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"tuner {importlib.metadata.version('tuner')}"


def test_dry_run_lays_out_and_renders_without_starting_anything(tmp_path: Path) -> None:
    """The embedded default and b300 (an engine not installed here): valid, partitions, the first
    configs' argv (enqueued first), an estimate; exit 0, and nothing created under runs/."""
    out = tune("run", "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("space ") and lines[0].endswith(
        "valid (llamacpp, 6 parameters, objectives slo.goodput, recall.effective_context)"
    )
    assert "  partition 0: cpu 0,1, ports 31000+" in lines
    enqueued = yaml.safe_load((ROOT / "search_spaces" / "cpu-llamacpp.yaml").read_text())["enqueue"][0]
    first = lines[lines.index("config 0 (enqueued) on cpu 0,1:") + 1]
    assert f"--ctx-size {enqueued['ctx-size']} " in first and "--host 127.0.0.1 --port 31000" in first
    assert lines[-2].startswith("estimate: 8 trials x at least ")
    # 8 trials, and the reference before and with the pick at the end, at up to 1m06s each
    assert lines[-1] == (
        "expected: about 12m06s (8 trials and 3 fresh-server re-measurement(s) at up to 1m06s each, 1 at a time); "
        "it ends within 18m00s (budget.deadline), with fewer trials where they do not fit"
    )
    b300 = tune("run", "--space", "b300", "--dry-run", cwd=tmp_path)
    assert b300.returncode == 0, b300.stderr
    assert (
        "engine: sglang: not installed here" in b300.stdout and " --tp " in b300.stdout and "CUDA_VISIBLE_DEVICES=" in b300.stdout
    )
    assert not (tmp_path / "runs").exists()
    bad = tune("run", "--space", "b300", "--dry-run", "--sampler", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_an_open_loop_dry_run_says_what_its_client_cores_can_send(tmp_path: Path) -> None:
    """A space whose SLO search runs open loop: the dry run prints one core's measured ceiling at
    the space's stream length and what the cores the probe will use can send."""
    from tests.conftest import tiny_space
    from tuner.probes import CEILING

    raw = tiny_space(objectives="goodput-vs-context-rate")
    raw["probes"]["recall"] = {"lengths": [128], "depths": [0.5]}
    raw["probes"]["slo"] = {"mode": "rate", "start_rate": 1, "max_rate": 4}
    (tmp_path / "open.yaml").write_text(yaml.safe_dump(raw))
    out = tune("run", "--space", str(tmp_path / "open.yaml"), "--dry-run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("open loop: "))
    assert f"one client core sends about {CEILING.rate(8):.0f} requests/s of 8-token streams" in line, line
    assert "the search asks up to max_rate 4/s" in line and "client-bound, never the answer" in line
