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

# One process imports once (optuna, SQLAlchemy, psycopg: ~1.3 CPU-s, which 16 separate processes
# paid 16 times), then forks N openers that wait on a pipe and open the storage together: the
# barrier also makes them start closer together than processes that finish importing one by one.
RACE = """
import os, sys
import psycopg  # the driver every opener loads: imported once, before the forks
from tuner.trials import connect
url, n = sys.argv[1], int(sys.argv[2])
if sys.argv[3:] == ["--plain"]:  # optuna's own RDBStorage, to show the race is there
    import optuna
    connect = optuna.storages.RDBStorage
read, write = os.pipe()
children = []
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        os.close(write)
        os.read(read, 1)  # returns once every write end is closed: all N forked, all go at once
        try:
            connect(url)
            os._exit(0)
        except BaseException as exc:
            print(f"{type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr, flush=True)
            os._exit(1)
    children.append(pid)
os.close(read)
os.close(write)
print(sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in children))
"""


def test_sqlite_urls_and_storage_objects_pass_through(tmp_path: Path) -> None:
    import optuna

    url = f"sqlite:///{tmp_path}/s.db"
    memory = optuna.storages.InMemoryStorage()
    assert connect(url) == url and connect(memory) is memory


def test_eight_processes_creating_the_tables_at_once_all_succeed(postgres: str) -> None:
    """Plain RDBStorage failed 30 of 40 such openings here (5 rounds of 8 forked at once, RACE with
    --plain: 7, 7, 4, 7, 5; unique violation on pg_type, or "type ... already exists"; 17 of 40
    when each was its own process); through connect() none may. Two rounds of 8: without the
    retry all 16 would pass about once in 4 billion runs (0.25 ** 16)."""
    plain = postgres.replace("postgresql+psycopg", "postgresql")
    for round_ in range(2):
        fresh = postgres.rsplit("/", 1)[0] + f"/race{round_}"
        for sql in (f"DROP DATABASE IF EXISTS race{round_}", f"CREATE DATABASE race{round_}"):
            create = f"import psycopg; psycopg.connect({plain!r}, autocommit=True).execute({sql!r})"
            admin = subprocess.run([sys.executable, "-c", create], capture_output=True, text=True, timeout=60)
            assert admin.returncode == 0, admin.stderr
        race = subprocess.run([sys.executable, "-c", RACE, fresh, "8"], capture_output=True, text=True, timeout=120)
        assert race.returncode == 0 and race.stdout.split() == ["0"], (round_, race.stdout, race.stderr[-2000:])
