"""Where a study keeps its evidence on disk: ``runs/<study>/``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["EVIDENCE_FILES", "RunDir", "write_json"]

DEFAULT_RUNS = Path("runs")
EVIDENCE_FILES = ("command.txt", "server.log", "evidence.json", "outcome.json")  # a trial's files kept as Optuna artifacts


def write_json(path: Path, data: Any) -> None:
    """Write atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDir:
    """``root``: runs/<study>/, this driver's local copy; ``artifact_dir``: the study's Optuna
    artifact store (a path every driver and the dashboard can read; default root/artifacts)."""

    root: Path
    artifact_dir: Path | None = None

    @classmethod
    def for_study(cls, study: str, runs: Path | None = None, artifacts: Path | None = None) -> RunDir:
        return cls((runs or Path(os.environ.get("TUNER_RUNS", DEFAULT_RUNS))) / study, artifacts)

    @property
    def db_url(self) -> str:
        return f"sqlite:///{(self.root / 'study.db').resolve()}"

    def trial(self, number: int) -> Path:
        return self.root / "trials" / str(number)

    @property
    def artifacts(self) -> Path:
        return self.artifact_dir or self.root / "artifacts"

    def artifact_store(self) -> Any:
        """Optuna's file-system artifact store at :attr:`artifacts` (optuna-dashboard --artifact-dir reads it)."""
        from optuna.artifacts import FileSystemArtifactStore

        self.artifacts.mkdir(parents=True, exist_ok=True)
        return FileSystemArtifactStore(str(self.artifacts))

    @property
    def trials_csv(self) -> Path:
        return self.root / "trials.csv"
