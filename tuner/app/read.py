"""Reading a study, once per command: open an existing one by name or URL, and read its record
(attrs and every trial) in one go; everything a command shows is computed from that record."""

from __future__ import annotations

from pathlib import Path

import optuna

from tuner.base.artifacts import RunDir
from tuner.base.credentials import mask
from tuner.base.exceptions import ConfigError
from tuner.objectives import ObjectiveSet
from tuner.space import SearchSpace
from tuner.trials import Studied, StudyRecord, connect, record_of

__all__ = [
    "open_existing",
    "read_record",
    "run_dir_of",
    "storage_error_text",
    "stored_objective_set",
    "stored_space",
]


def read_record(study: str, storage: str | None) -> StudyRecord:
    """The existing study ``study`` (in ``storage``, default runs/<study>/study.db) read once."""
    return record_of(open_existing(study, storage))


def open_existing(study: str, storage: str | None) -> optuna.Study:
    """An existing study: runs/<study>/study.db, or ``storage`` (a URL, or NAME=URL)."""
    labelled = False
    if storage is not None and "=" in storage.split("://")[0]:  # NAME=URL
        labelled = True
        study, storage = storage.split("=", 1)
    run_dir = RunDir.for_study(study)
    url = storage or run_dir.db_url
    if storage is None and not (run_dir.root / "study.db").is_file():
        raise ConfigError(f"no study {study!r} in {run_dir.root}/ (use --storage for another place)")
    try:
        opened = connect(url)
        names = optuna.get_all_study_names(storage=opened)
    except Exception as exc:  # noqa: BLE001 - any storage error is the user's URL
        raise ConfigError(mask(f"cannot open storage {url}: {storage_error_text(exc)}")) from None
    if labelled and study not in names and len(names) == 1:
        study = names[0]  # LABEL=URL of a storage holding one study under another name (never a typo's stand-in)
    if study not in names:
        raise ConfigError(f"study {study!r} not found in {mask(url)} (it holds: {', '.join(names) or 'nothing'})")
    return optuna.load_study(study_name=study, storage=opened)


def run_dir_of(study: str, storage: str | None) -> Path | None:
    """Where a study's trial directories are: beside its SQLite file (runs/<study>/ by default);
    None for other storages (their trials carry their launch records themselves)."""
    if storage and "=" in storage.split("://")[0]:
        study, storage = storage.split("=", 1)
    if storage is None:
        return RunDir.for_study(study).root
    if storage.startswith("sqlite:///"):
        path = storage[len("sqlite:///") :].split("?", 1)[0]
        return Path(path.removeprefix("file:")).parent
    return None


def stored_space(study: Studied) -> SearchSpace:
    """The space the study was run with (as stored, its SLO targets filled in)."""
    record = record_of(study, trials=False)
    if record.space is None:
        raise ConfigError(f"study {record.name!r} was not made by tuner (no stored space)")
    return SearchSpace.model_validate(record.space)


def stored_objective_set(study: Studied) -> ObjectiveSet:
    """The objective set the study was run with."""
    record = record_of(study, trials=False)
    if record.objectives is None:
        raise ConfigError(f"study {record.name!r} was not made by tuner (no stored objectives)")
    return ObjectiveSet.model_validate(record.objectives)


def storage_error_text(exc: BaseException) -> str:
    """The root of a storage error in one line: sqlite's own words ("database disk image is
    malformed", "attempt to write a readonly database"), not Optuna's generic wrapper."""
    root: BaseException = exc
    while (inner := getattr(root, "orig", None) or root.__cause__) is not None and inner is not root:
        root = inner
    lines = str(root).strip().splitlines()
    return f"{type(root).__name__}: {lines[0] if lines else ''}"
