"""tuner as a package people install: the wheel carries its spaces and objective sets, and an
installed (not editable) tuner runs the embedded default from an empty directory."""

from __future__ import annotations

import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, built_once


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per test run (both tests here read it, whichever worker runs them)."""

    def build(out: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(out)], check=True, cwd=out, timeout=300
        )

    return next(built_once(tmp_path_factory, "wheel", build).glob("tuner-*.whl"))


def test_the_wheel_carries_every_space_and_objective_set(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("search_spaces", "objectives"):
        for path in (ROOT / folder).glob("*.yaml"):
            assert f"tuner/data/{folder}/{path.name}" in names, f"{path.name} is not in the wheel"


@pytest.mark.integration
# The embedded default's trial serves with 2 threads on 2 cores, which wait for each other at every
# op: beside one busy process its baseline streamed 0.7-1.6 tokens/s instead of ~64 for 200-270 s
# (measured 2026-12-02; git history). Alone (after the other quiet tests, the unit tests done) it
# took 80 s (ci24, ci25); beside other tests 78-198 s, and most of a core besides.
@pytest.mark.quiet(settled=True)
def test_an_installed_wheel_runs_the_embedded_default_from_an_empty_directory(
    wheel: Path, tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """A fresh venv with the wheel installed (not editable); its dependencies are this
    environment's, reached through a path file (no second download of Ray), which runs no
    editable finder, so `tuner` can only come from the wheel."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (purelib / "deps-of-the-test-env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(purelib), str(wheel)], check=True, timeout=300
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import tuner; print(tuner.__file__)"], capture_output=True, text=True, cwd=empty, check=True
    )
    assert where.stdout.startswith(str(purelib)), where.stdout  # the wheel's tuner, not the checkout's
    out = subprocess.run(
        [str(python), "-m", "tuner", "run", "--trials", "1", "--no-remeasure"],
        capture_output=True,
        text=True,
        cwd=empty,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "trial 0 COMPLETE" in out.stdout, out.stdout[-3000:]
    assert (empty / "runs" / "cpu-llamacpp" / "study.db").is_file()
