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
    out = tune("diagnose", "--engine", "sglang", "--json", "-", stdin="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n")
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
