"""On the H200 (device tool), after scripts/h200.sh ran `tune run` there: check what it produced."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.checks import check_tune

RUNS = Path(__file__).resolve().parents[2] / "runs"
pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_real_h200_tune(engine: str) -> None:
    run_dir = RUNS / f"h200-{engine}"
    if not (run_dir / "study.db").exists():
        pytest.skip(f"no h200-{engine} tune ran on this machine")
    check_tune(run_dir, f"h200-{engine}", engine)
