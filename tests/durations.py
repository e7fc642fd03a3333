"""tests/durations.txt from a full run's ``--durations=0`` output on stdin: seconds per test
(setup, call and teardown summed), the slow ones (3 s or more), longest first. The conftest
starts the longest first (longest-processing-time order), so no worker ends the run alone with one.

    python -m pytest -n auto --maxprocesses 4 --durations=0 | python tests/durations.py > tests/durations.txt
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LINE = re.compile(r"\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)")
HEADER = """# Seconds each slow test took in the last full run (2 cores; pytest --durations=0), longest first.
# tests/conftest.py starts the longest first so that no worker ends the run alone with one.
# Refresh: python -m pytest -n auto --maxprocesses 4 --durations=0 | python tests/durations.py > tests/durations.txt"""


def parse(text: str, floor: float = 3.0) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for line in text.splitlines():
        if m := LINE.match(line):
            name = m[2].split("@")[0]  # --dist loadgroup suffixes a grouped test's id with @group
            seconds[name] = seconds.get(name, 0.0) + float(m[1])
    return {name: s for name, s in seconds.items() if s >= floor}


def load(path: Path) -> dict[str, float]:
    """The file's seconds per test id (empty where it is missing)."""
    if not path.is_file():
        return {}
    rows = (line.split(maxsplit=1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {name.strip(): float(s) for s, name in rows}


if __name__ == "__main__":
    found = parse(sys.stdin.read())
    print(HEADER)
    for name, s in sorted(found.items(), key=lambda kv: -kv[1]):
        print(f"{s:6.1f} {name}")
