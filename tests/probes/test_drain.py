"""The drain between levels, against a scripted engine count (SGLang's /metrics gauges)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import pytest

from tuner.base.records import Capacity
from tuner.probes import _drain
from tuner.probes._base import ServerHandle
from tuner.probes._drain import drain

SOURCE = ("/metrics", ("sglang:num_running_reqs", "sglang:num_queue_reqs"))


def _engine(counts: Iterator[tuple[int, int]]) -> httpx.AsyncClient:
    """A client whose server answers /metrics with the next (running, queued) of ``counts`` (the
    last one from then on)."""
    last = [(0, 0)]

    def reply(request: httpx.Request) -> httpx.Response:
        last[0] = next(counts, last[0])
        running, queued = last[0]
        text = f'sglang:num_running_reqs{{model_name="m"}} {running}.0\nsglang:num_queue_reqs{{model_name="m"}} {queued}.0\n'
        return httpx.Response(200, text=text)

    return httpx.AsyncClient(transport=httpx.MockTransport(reply))


def _run(counts: Iterable[tuple[int, int]], slow_pings: int = 0, **kwargs: Any) -> tuple[dict[str, Any], int]:
    """drain() on a server whose count reads ``counts`` and whose 1-token requests take 0.01 s
    (the first ``slow_pings`` 1 s: a queue the count does not show); returns what it stored and
    how many 1-token requests it sent."""
    sent = [0]

    async def ping() -> float:
        sent[0] += 1
        return 1.0 if sent[0] <= slow_pings else 0.01

    async def go() -> dict[str, Any]:
        async with _engine(iter(counts)) as client:
            server = ServerHandle("http://engine", "m", Capacity(), in_flight_source=SOURCE)
            return await drain(client, server, ping, idle_s=0.01, **kwargs)

    return asyncio.run(go()), sent[0]


@pytest.fixture(autouse=True)
def _fast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_drain, "POLL_S", 0.01)
    monkeypatch.setattr(_drain, "STALE_S", 0.2)


def test_a_busy_count_that_changes_is_waited_out_whatever_a_fast_1_token_request_says() -> None:
    """SGLang schedules prefill first: a 1-token request is answered at once beside 256 running
    requests. While the count moves, it is what decides (the H200 confirmation step that started
    0.16 s after a broken run, on a server still running 256 and queueing 265)."""
    working_off = [(256, 265 - k) for k in range(0, 265, 5)] + [(256 - k, 0) for k in range(0, 256, 8)]
    stored, pings = _run([*working_off, (0, 0), (0, 0)])
    assert stored["drained"] is True and stored["drained_by"] == "engine count and a 1-token request", stored
    assert pings == 1  # only once the count read zero twice


def test_a_count_stuck_at_one_busy_value_is_a_stale_gauge_and_a_fast_1_token_request_ends_the_wait() -> None:
    stored, pings = _run([(3, 0)] * 1000)
    assert stored["drained"] is True and "stale" in stored["drained_by"], stored
    assert pings >= 1 and stored["drain_s"] >= 0.2, stored


def test_a_count_that_reads_zero_once_between_busy_reads_is_not_drained() -> None:
    """llama-server's /slots reads idle in the moment between a slot's release and the next
    queued request taking it: zero must read twice in a row."""
    stored, pings = _run([(1, 0), (0, 0), (1, 0), (0, 0), (2, 0), (0, 0), (0, 0)])
    assert stored["drained"] is True and stored["drained_by"] == "engine count and a 1-token request", stored
    assert pings == 1


def test_a_count_at_zero_is_checked_by_a_1_token_request_where_one_can_be_timed() -> None:
    """llama-server's /slots does not show the requests waiting for a slot: at zero twice, a
    1-token request that waits behind them says the server is not drained yet."""
    stored, pings = _run([(0, 0)] * 1000, slow_pings=3)
    assert stored["drained"] is True and stored["drained_by"] == "engine count and a 1-token request", stored
    assert pings == 4, pings


def test_a_server_still_busy_at_the_bound_is_measured_anyway_and_says_so() -> None:
    stored, _ = _run(((k % 7 + 1, 0) for k in range(100_000)), bound=0.3)
    assert stored["drained"] is False and stored["drain_s"] >= 0.3, stored


def test_a_count_at_zero_with_1_token_requests_that_stay_slow_ends_at_the_bound() -> None:
    stored, pings = _run([(0, 0)] * 100_000, slow_pings=100_000, bound=0.3)
    assert stored["drained"] is False and stored["drained_by"] == "1-token request" and stored["drain_s"] >= 0.3, stored
    assert pings >= 1
