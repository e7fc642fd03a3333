"""docs/cluster.md's "How to run a study on several machines" (README links it), run as written
with Ray's own CLI and token authentication on: a head
(`ray start --head`), a node advertising two devices (`ray start --address ... --resources ...`),
and `tune run --ray-address ... --storage postgresql+psycopg://...`. Ray runs under a HOME of its
own (its token lands in HOME/.ray/auth_token); the processes it starts are found by that HOME in
their environment and ended with their process groups, never by name."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from tests.conftest import ROOT, tiny_space, worker_port
from tuner.host import procfs
from tuner.host.partitions import free_port

pytestmark = pytest.mark.integration


def _started_with(home: Path) -> list[int]:
    found = []
    for p in procfs.processes():
        try:
            environ = Path(f"/proc/{p.pid}/environ").read_bytes()
        except OSError:
            continue
        if f"HOME={home}".encode() in environ.split(b"\0"):
            found.append(p.pid)
    return found


def _end(home: Path) -> None:
    """End every process started under ``home``: SIGTERM to their groups, then SIGKILL to whatever
    is left (Ray's gcs_server ignores SIGTERM), scanning again until none remains."""
    for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGKILL, signal.SIGKILL):
        pids = _started_with(home)
        if not pids:
            return
        groups = {found.pgrp for pid in pids if (found := procfs.stat(pid)) is not None} - {os.getpgrp()}
        for target in [-g for g in groups] + pids:
            try:
                os.kill(target, sig)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(2)


def test_the_readme_cluster_commands_work_with_token_auth(
    postgres: str, tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    readme = (ROOT / "docs" / "cluster.md").read_text()  # README links it: "On a cluster"
    for line in (
        "ray get-auth-token --generate",
        'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$(cat ~/.ray/auth_token)"',
        "ray start --head --port 6379",
        'ray start --address HEAD:6379 --resources \'{"tuner_device_0": 1, "tuner_device_1": 1}\'',
        "tune run --space b300 --study night1 --ray-address HEAD:6379 --storage postgresql+psycopg://",
    ):
        assert line in readme, f"docs/cluster.md no longer says: {line}"
    ray = shutil.which("ray", path=str(Path(sys.executable).parent))
    tune = shutil.which("tune", path=str(Path(sys.executable).parent))
    assert ray and tune
    home = tmp_path / "home"
    home.mkdir()
    port = free_port("127.0.0.1", worker_port(36379), 400)
    from tuner.engines.llamacpp_provision import cache_root

    # Ray's HOME is the test's; the engine and model stay where this machine keeps them (no rebuild)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "HOME": str(home),
        "TUNER_CACHE": str(cache_root()),
    }
    raw = tiny_space(name="night1")
    raw["hardware"] = {"kind": "cpu", "devices": [0, 1], "per_trial": 1}
    raw["parameters"] = {"parallel": {"type": "int", "low": 1, "high": 2}}
    raw["enqueue"] = [{"parallel": 1}, {"parallel": 2}]
    raw["budget"] = {"trials": 2}
    space = tmp_path / "night1.yaml"
    space.write_text(yaml.safe_dump(raw))
    script = f"""
set -e
{ray} get-auth-token --generate > /dev/null
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$(cat ~/.ray/auth_token)"
{ray} start --head --port {port} --num-cpus 1 --include-dashboard false
{ray} start --address 127.0.0.1:{port} --num-cpus 2 --resources '{{"tuner_device_0": 1, "tuner_device_1": 1}}'
{tune} run --space {space} --study night1 --ray-address 127.0.0.1:{port} --storage {postgres} --no-remeasure
"""
    try:
        out = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, start_new_session=True
        )
    finally:
        _end(home)
    assert (home / ".ray" / "auth_token").is_file(), out.stdout[-2000:] + out.stderr[-2000:]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    trials = optuna.load_study(study_name="night1", storage=postgres).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert {tuple(t.user_attrs["partition"]) for t in trials} == {(0,), (1,)}
    assert not [p for p in _started_with(home) if (found := procfs.stat(p)) is not None and not found.zombie], (
        "a Ray process outlived the test"
    )
