"""The open-loop cross-check splits its rate over several `vllm bench serve` processes: their
detailed results merge into one p99 over every request, summed throughput, and what they delivered."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from goodput_crosscheck import merge


def _part(starts: list[float], ttft: float, failed: int = 0) -> dict:
    n = len(starts)
    return {
        "completed": n - failed, "failed": failed, "output_throughput": 100.0, "duration": starts[-1] - starts[0] + 1.0,
        "mean_e2el_ms": 1000.0, "start_times": starts, "ttfts": [ttft] * n, "itls": [[0.01, 0.02]] * n,
        "errors": ["boom" if i < failed else "" for i in range(n)],
    }  # fmt: skip


def test_parts_merge_into_one_p99_and_their_delivered_rate() -> None:
    a = _part([i * 0.1 for i in range(101)], ttft=0.2)  # 10 requests/s each over 10 s
    b = _part([i * 0.1 for i in range(101)], ttft=0.8, failed=1)
    merged = merge([a, b], rate=20.0)
    assert merged["completed"] == 201 and merged["failed"] == 1 and merged["output_throughput"] == 200.0
    assert merged["p99_ttft_ms"] == pytest.approx(800.0) and merged["p99_itl_ms"] == pytest.approx(20.0)
    assert merged["achieved_over_offered"] == pytest.approx(1.0) and merged["delivery_from"] == "send times"
    behind = merge([a, _part([i * 0.125 for i in range(101)], ttft=0.2)], rate=20.0)  # the second sent 8/s of its 10
    assert behind["achieved_over_offered"] == pytest.approx(0.9)


def test_without_send_times_the_duration_less_a_request_is_the_span() -> None:
    part = _part([i * 0.1 for i in range(101)], ttft=0.2)
    del part["start_times"]
    merged = merge([part], rate=10.0)
    assert merged["delivery_from"] == "duration less a request" and merged["achieved_over_offered"] == pytest.approx(1.01)
