"""scripts/vllm_timeline.py reads vLLM's own stats lines per minute: on the H100's 7-minute
confirmation at 50.4/s (2026-12-07) the minutes that broke the SLO are those where the KV pool
filled and requests waited."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "docs/data/goodput/h100-vllm-2026-12-07/confirm-50.4/server.log.xz"


def test_the_minutes_where_the_kv_pool_filled_are_those_with_requests_waiting() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts/vllm_timeline.py"), str(LOG)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    rows = [line for line in out if line.strip()[:1].isdigit()]
    assert len(rows) == 7, out
    assert "waiting max   6 (in 1 of 6 lines), KV cache used max  95.6%" in rows[2], rows[2]  # minute 3: TTFT p99 1.18 s
    assert "waiting max   8 (in 1 of 6 lines), KV cache used max  93.3%" in rows[6], rows[6]  # minute 7: 1.02 s
    assert all("waiting max   0" in rows[k] for k in (0, 3, 4, 5)), rows  # minutes that held


def test_a_log_without_load_says_so(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("(APIServer pid=1) INFO 12-07 17:51:00 [loggers.py:310] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
                   "Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%\n")  # fmt: skip
    done = subprocess.run([sys.executable, str(ROOT / "scripts/vllm_timeline.py"), str(log)], capture_output=True, text=True)
    assert done.returncode == 1 and "no stats line with a request running" in done.stderr, done
