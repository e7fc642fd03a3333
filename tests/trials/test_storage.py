"""Two processes opening one fresh PostgreSQL database at the same moment both get the study storage
(CI once saw a driver end with "UniqueViolation ... pg_type_typname_nsp_index" while the test's own
reader created Optuna's tables beside it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tuner.trials import connect

pytestmark = pytest.mark.integration

OPEN = "import sys; from tuner.trials import connect; connect(sys.argv[1]); print('ok')"


def test_sqlite_urls_and_storage_objects_pass_through(tmp_path: Path) -> None:
    import optuna

    url = f"sqlite:///{tmp_path}/s.db"
    memory = optuna.storages.InMemoryStorage()
    assert connect(url) == url and connect(memory) is memory


def test_eight_processes_creating_the_tables_at_once_all_succeed(postgres: str) -> None:
    """Plain RDBStorage failed 17 of 40 such openings here (5 rounds of 8: unique violation on
    pg_type, or "relation already exists"); through connect() none may. Two rounds of 8: without
    the retry all 16 would pass about once in 7,000 runs (0.575 ** 16)."""
    plain = postgres.replace("postgresql+psycopg", "postgresql")
    for round_ in range(2):
        fresh = postgres.rsplit("/", 1)[0] + f"/race{round_}"
        for sql in (f"DROP DATABASE IF EXISTS race{round_}", f"CREATE DATABASE race{round_}"):
            create = f"import psycopg; psycopg.connect({plain!r}, autocommit=True).execute({sql!r})"
            admin = subprocess.run([sys.executable, "-c", create], capture_output=True, text=True, timeout=60)
            assert admin.returncode == 0, admin.stderr
        procs = [
            subprocess.Popen([sys.executable, "-c", OPEN, fresh], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(8)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0] * 8, (round_, [err[-500:] for _, err in outs if err])
