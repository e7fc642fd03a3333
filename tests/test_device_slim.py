"""scripts/device-slim.sh: while on, the committed data the device never reads does not travel and
no commit can delete it; off gives back the index exactly as it was."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, check=check, capture_output=True, text=True)


def _slim(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "scripts/device-slim.sh", *args], cwd=repo, capture_output=True, text=True)


def _travels(repo: Path) -> set[str]:
    return set(_git(repo, "ls-files", "-co", "--exclude-standard").stdout.split())


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(repo)], check=True)
    shutil.copy(ROOT / "scripts" / "device-slim.sh", repo / "scripts" / "device-slim.sh")  # the tree's, committed or not
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    return repo


def test_on_keeps_the_data_home_and_off_gives_the_index_back(clone: Path) -> None:
    keep = next(p for p in _git(clone, "ls-files", "docs/data/goodput").stdout.split() if p.endswith(".db"))
    before, index = _travels(clone), _git(clone, "ls-files", "-s").stdout
    on = _slim(clone, "on", keep)
    assert on.returncode == 0, on.stderr
    now = _travels(clone)
    assert keep in now
    assert not any(p.startswith(("docs/data/goodput/", "tests/fixtures/gpu/")) and p != keep for p in now)
    assert "docs/h200-smollm2-fronts.html" not in now
    assert (clone / "docs/data/goodput").is_dir() and (clone / "tests/fixtures/gpu").is_dir()  # still on disk
    assert float(on.stdout.split()[0]) < 12  # MiB that travel: 26 in all on 2026-12-07

    refused = _git(clone, "commit", "-q", "-m", "would delete the data", check=False)
    assert refused.returncode != 0 and "device-slim" in refused.stderr
    again = _slim(clone, "on")
    assert again.returncode == 1 and "already on" in again.stderr

    off = _slim(clone, "off")
    assert off.returncode == 0, off.stderr
    assert _git(clone, "ls-files", "-s").stdout == index
    assert _travels(clone) == before
    assert _git(clone, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert not (clone / ".git/hooks/pre-commit").exists()


def test_on_refuses_while_something_is_staged(clone: Path) -> None:
    (clone / "README.md").write_text((clone / "README.md").read_text() + "\nstaged\n")
    _git(clone, "add", "README.md")
    refused = _slim(clone, "on")
    assert refused.returncode == 1 and "staged" in refused.stderr
    assert _git(clone, "diff", "--cached", "--name-only").stdout.split() == ["README.md"]
    assert not (clone / ".git/hooks/pre-commit").exists()
