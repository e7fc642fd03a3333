"""Where a study keeps its evidence on disk: ``runs/<study>/``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunDir", "write_json"]

DEFAULT_RUNS = Path("runs")


def write_json(path: Path, data: Any) -> None:
    """Write atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


@dataclass(frozen=True)
class RunDir:
    root: Path

    @classmethod
    def for_study(cls, study: str, runs: Path | None = None) -> RunDir:
        return cls((runs or Path(os.environ.get("TUNER_RUNS", DEFAULT_RUNS))) / study)

    @property
    def db_url(self) -> str:
        return f"sqlite:///{(self.root / 'study.db').resolve()}"

    def trial(self, number: int) -> Path:
        return self.root / "trials" / str(number)

    @property
    def trials_csv(self) -> Path:
        return self.root / "trials.csv"
