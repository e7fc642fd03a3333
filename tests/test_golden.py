"""What `tune status`, `tune pareto`, `tune export` and `tune limits` print for committed studies,
byte for byte (taken before the application layer moved reading out of the commands: a change
of structure must not change a word). Regenerate only for a change of output meant as such:
TUNER_GOLDEN=write pytest tests/test_golden.py"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, tune_here

GOLDEN = ROOT / "tests" / "golden"
STUDIES = {  # name -> committed study (and its pick): a closed-loop goodput tune, an open-loop one confirmed
    "h200-vllm-goodput": (ROOT / "docs/data/goodput/h200-vllm-goodput.db", "5"),
    "h200-vllm-goodput-rate": (ROOT / "docs/data/goodput/h200-rate-2026-12-03/study.db", "0"),
}
COMMANDS = {
    "status": ["status"],
    "pareto": ["pareto", "--out", "front"],
    "export-cmd": ["export"],
    "export-json": ["export", "--format", "json"],
    "export-yaml": ["export", "--format", "yaml"],
    "export-systemd": ["export", "--format", "systemd"],
    "limits": ["limits", "--trial"],  # the study's pick
}
CASES = [(study, cmd) for study in STUDIES for cmd in COMMANDS]


def _tune(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = tune_here(*args)
    out = capsys.readouterr()
    return f"$ tune {' '.join(args)}\n--- exit {code}\n--- stdout\n{out.out}--- stderr\n{out.err}"


@pytest.mark.skipif(shutil.which("vllm") is not None, reason="export says whether this machine has the engine")
@pytest.mark.parametrize(("study", "command"), CASES, ids=[f"{s}-{c}" for s, c in CASES])
def test_output_is_unchanged(
    study: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, chosen = STUDIES[study]
    shutil.copy(db, tmp_path / "study.db")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("NO_COLOR", raising=False)
    args = [*COMMANDS[command], chosen] if command == "limits" else COMMANDS[command]
    text = _tune([*args, "--study", study, "--storage", "sqlite:///study.db"], capsys)
    golden = GOLDEN / f"{study}.{command}.txt"
    if os.environ.get("TUNER_GOLDEN") == "write":
        golden.write_text(text)
    assert text == golden.read_text()
