"""Opening a study's storage so that two processes opening one database at once both succeed."""

from __future__ import annotations

import logging
import time

import optuna
from sqlalchemy import exc as sql_errors

__all__ = ["connect"]

logger = logging.getLogger(__name__)

ATTEMPTS = 5


def connect(url: str | optuna.storages.BaseStorage) -> str | optuna.storages.BaseStorage:
    """The storage behind ``url`` for ``optuna.create_study`` / ``load_study``.

    On a server database (PostgreSQL, MySQL) Optuna's RDBStorage creates its tables on first use.
    Two processes doing that at the same moment (two drivers started together on a fresh database,
    a driver and a `tune status`) collide in the database's catalog: PostgreSQL answers the loser
    with a unique violation on ``pg_type`` (or "relation already exists"), which used to end that
    driver with a storage error. The loser tries again; by then the tables exist. SQLite and
    other URLs, and storage objects, are returned as they are (SQLite's file lock serializes the
    creation)."""
    if not isinstance(url, str) or url.startswith("sqlite") or "://" not in url:
        return url
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return optuna.storages.RDBStorage(url)
        except (sql_errors.IntegrityError, sql_errors.ProgrammingError) as exc:
            if attempt == ATTEMPTS or not _schema_race(exc):
                raise
            logger.info("storage: another process is creating the tables (%s); trying again", type(exc.orig).__name__)
            time.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


def _schema_race(exc: sql_errors.DBAPIError) -> bool:
    text = str(exc.orig)
    return "pg_type_typname_nsp_index" in text or "already exists" in text or "duplicate key" in text
