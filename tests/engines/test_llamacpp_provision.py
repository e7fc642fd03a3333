"""Provisioning errors are one line saying what to install; the cache is keyed by version."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.base.exceptions import ProvisionError
from tuner.engines import llamacpp_provision as provision


@pytest.fixture()
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path))
    monkeypatch.delenv("TUNER_LLAMA_SERVER", raising=False)
    return tmp_path


@pytest.mark.parametrize(
    ("missing", "words"), [("cmake", "cmake is not installed: install it"), ("c++", "no C++ compiler found: install one")]
)
def test_missing_tool_is_one_line(empty_cache: Path, monkeypatch: pytest.MonkeyPatch, missing: str, words: str) -> None:
    real_which = provision.shutil.which
    gone = {"cmake"} if missing == "cmake" else {"c++", "g++", "clang++"}
    monkeypatch.setattr(provision.shutil, "which", lambda name: None if name in gone else real_which(name))
    with pytest.raises(ProvisionError) as info:
        provision.server_binary()
    assert words in str(info.value) and "\n" not in str(info.value)


def test_not_installed_without_install(empty_cache: Path) -> None:
    with pytest.raises(ProvisionError, match="run `tune engines install llamacpp`"):
        provision.server_binary(install=False)
    with pytest.raises(ProvisionError, match="run `tune engines install llamacpp`"):
        provision.model_file(install=False)


def test_cache_is_keyed_by_version(empty_cache: Path) -> None:
    target = empty_cache / "llamacpp" / provision.LLAMA_CPP_PYTHON_VERSION / "llama-server"
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    assert provision.server_binary(install=False) == target


def test_override_must_be_executable(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_LLAMA_SERVER", str(empty_cache / "nope"))
    with pytest.raises(ProvisionError, match="is not an executable file"):
        provision.server_binary()


ROOT = Path(__file__).resolve().parents[2]


def test_two_processes_that_need_llama_server_build_it_once(empty_cache: Path) -> None:
    """Two `tune` processes (or test workers) on an empty cache: the second waits on the cache's
    lock for the first one's build, then uses it (the build here stands in: 1 s, counted)."""
    import subprocess
    import sys

    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tuner.engines import llamacpp_provision as p\n"
        "def build(target, progress):\n"
        "    with open(sys.argv[1], 'a') as f: f.write('built\\n')\n"
        "    time.sleep(1.0)\n"
        "    target.parent.mkdir(parents=True, exist_ok=True); target.write_text('binary')\n"
        "p._build_server = build\n"
        "print(p.server_binary())\n"
    )
    counted = empty_cache / "builds.txt"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "TUNER_CACHE": str(empty_cache)}
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(counted)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [proc.communicate(timeout=60)[0].strip() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert outs[0] == outs[1] and outs[0].endswith("llama-server")
    assert counted.read_text().count("built") == 1


def test_an_interrupted_build_leaves_no_process_behind(tmp_path: Path) -> None:
    """Ctrl-C during the build: the build's whole session ends, also its jobs in process groups of
    their own (ninja's compilers: the issue saw them run on for ~30 s)."""
    import signal
    import subprocess
    import sys
    import time

    from tuner.host import procfs

    job = tmp_path / "job.pid"
    build = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen(['sleep', '120'], process_group=0)\n"
        f"open({str(job)!r}, 'w').write(str(p.pid))\n"
        "print('[1/9] compiling', flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tuner.engines import llamacpp_provision as p\n"
        f"p._run_with_progress([sys.executable, '-c', {build!r}], Path({str(tmp_path / 'build.log')!r}), lambda f, line: None)\n"
    )
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", parent], env=env)
    deadline = time.monotonic() + 30
    while not job.exists() or not job.read_text():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    child = int(job.read_text())
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    time.sleep(0.2)
    alive = (st := procfs.stat(child)) is not None and not st.zombie
    if alive:
        __import__("os").kill(child, signal.SIGKILL)
    assert not alive, "the build's job outlived the interrupted build"
