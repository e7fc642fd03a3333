"""The open loop sends what it reports: arrival times fixed from the seed, sent by processes of
their own, and each level's delivery (achieved over offered, send lag) and backlog stored beside
what it was asked. A level the senders could not deliver is client-bound and never the SLO's
answer; arrivals beyond what the server completes are never reported as held."""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import assert_group_gone, handle, llama_server_process
from tests.fault.sse_server import running
from tuner.base.level import levels_in
from tuner.base.records import Capacity
from tuner.probes import LoadProbe, ServerHandle
from tuner.probes import load as load_module
from tuner.probes._senders import CEILING, Senders, arrival_offsets, senders_for
from tuner.probes._stream import RequestRecord
from tuner.probes.load import (
    DELIVERED_MIN,
    SEND_LAG_MAX,
    client_verdict,
    delivered_at,
    open_loop_figures,
    short_of_schedule,
    summarize,
)
from tuner.probes.slo import search_rate
from tuner.space import LoadProbeSpec, SloProbeSpec, SloTargets

ROOT = Path(__file__).resolve().parents[2]
LAX = SloTargets(ttft_p99=1000.0, error_rate=0.99)  # only delivery and backlog can fail a level


def test_the_planned_ceiling_is_under_every_measured_one() -> None:
    """The cost model a sender is planned by never promises more than one core delivered: each
    committed run of benchmarks/client_ceiling.py with engine-spaced tokens (docs/measurements.md)
    measured a ceiling at two stream lengths, and CEILING's rate is at or under each of them."""
    import json

    runs = sorted((ROOT / "docs/data/goodput").glob("client-ceiling-gap-r*.json"))
    assert len(runs) >= 3, runs
    for path in runs:
        measured = json.loads(path.read_text())
        assert measured["gap"] > 0, path
        for tokens, ceiling in measured["ceilings"].items():
            assert CEILING.rate(int(tokens)) <= ceiling, (path.name, tokens, CEILING.rate(int(tokens)), ceiling)


def test_the_arrivals_are_fixed_by_the_seed_and_average_the_rate() -> None:
    first = list(itertools.islice(arrival_offsets(50.0, seed=3), 20_000))
    assert first == list(itertools.islice(arrival_offsets(50.0, seed=3), 20_000))
    assert first != list(itertools.islice(arrival_offsets(50.0, seed=4), 20_000))
    assert first == sorted(first) and first[0] > 0
    assert 20_000 / first[-1] == pytest.approx(50.0, rel=0.03)


def test_a_rate_gets_the_senders_it_needs_up_to_the_cores() -> None:
    one = CEILING.headroom * CEILING.rate(128)
    assert senders_for(0.5 * one, 128, cores=4) == (1, True)
    assert senders_for(2.5 * one, 128, cores=4) == (3, True)
    count, enough = senders_for(20 * one, 128, cores=2)  # 20 senders' worth on 2 cores: it says so
    assert count == 2 and not enough


def _records(rate: float, seed: int, until: float, *, lag: float = 0.0, skip: int = 0, life: float = 0.3) -> list[RequestRecord]:
    """What a level's senders saw: the schedule's arrivals (but every ``skip``-th, never sent)
    sent ``lag`` late, each ending ``life`` after its arrival."""
    recs = []
    for i, t in enumerate(itertools.takewhile(lambda t: t < until, arrival_offsets(rate, seed))):
        if skip and i % skip == 0:
            continue
        rec = RequestRecord(ok=True, started=t, sent=t + lag, ttft=0.05, e2e=life, stamps=[t + 0.05, t + life])
        recs.append(rec)
    return recs


def _level_of(recs: list[RequestRecord], rate: float, seed: int) -> dict[str, Any]:
    """The level's summary over the window [10, 30) s, as rate_level stores it."""
    return {**summarize(recs, 10.0, 30.0, 10, 2), **open_loop_figures(recs, 10.0, 30.0, rate, seed, 0.0)}


def test_a_level_that_sent_its_schedule_on_time_is_delivered() -> None:
    figures = _level_of(_records(40.0, 1, 40.0), 40.0, 1)
    assert figures["achieved_over_offered"] == 1.0 and not figures["client_bound"]
    assert figures["offered_rate"] == pytest.approx(40.0, rel=0.15)  # the Poisson draw in 20 s
    assert figures["achieved_rate"] == figures["offered_rate"]
    assert figures["completion_rate"] == pytest.approx(figures["offered_rate"], rel=0.05)
    assert figures["growth"] - figures["growth_ci"] <= 0 <= figures["growth"] + figures["growth_ci"], figures
    assert SloTargets(ttft_p99=1.0).violated({**figures, "horizon_s": 600.0}) == []


def test_a_level_stores_its_fullest_count_of_requests_in_the_system() -> None:
    """At 40/s of 0.3-s requests, about 12 are in the system on average and more at its fullest; a
    stall that keeps 2 s of arrivals in (the engine past its graph cap, say) shows in the peak,
    counted exactly: every arrival of the stall's 2 s, those from before it having ended."""
    recs = _records(40.0, 1, 40.0)
    steady = open_loop_figures(recs, 10.0, 30.0, 40.0, 1, 0.0)
    assert steady["in_system_mean"] == pytest.approx(12, rel=0.5) and steady["in_system_max"] >= steady["in_system_mean"]
    assert steady["in_system_max"] < 40, steady
    stalled = [
        RequestRecord(ok=True, started=r.started, sent=r.sent, ttft=0.05, e2e=22.0 - r.started, stamps=[r.started + 0.05, 22.0])
        if 20.0 <= r.started < 22.0
        else r
        for r in recs
    ]
    peak = open_loop_figures(stalled, 10.0, 30.0, 40.0, 1, 0.0)["in_system_max"]
    stuck = sum(1 for r in recs if 20.0 <= r.started < 22.0)
    assert peak == stuck, (peak, stuck)


def test_a_shortfall_is_client_bound_and_a_late_loop_only_where_the_level_broke() -> None:
    short = open_loop_figures(_records(40.0, 1, 40.0, skip=10), 10.0, 30.0, 40.0, 1, 0.0)
    assert short["achieved_over_offered"] == pytest.approx(0.9, abs=0.02) and short["client_bound"]
    assert client_verdict(short, []) is not None  # not offered: says nothing, held or not
    late = open_loop_figures(_records(40.0, 1, 40.0, lag=2 * SEND_LAG_MAX), 10.0, 30.0, 40.0, 1, 0.0)
    assert late["achieved_over_offered"] == pytest.approx(1.0, abs=0.02)  # uniformly late: the count is there
    assert late["send_lag_p99"] == pytest.approx(2 * SEND_LAG_MAX) and late["client_late"] and not late["client_bound"]
    assert client_verdict(late, []) is None  # offered, and held with the lag in its TTFTs: a hold
    assert "ms late at p99" in str(client_verdict(late, ["ttft_p99 1.2 > 1"]))  # a break the lag may have caused


def test_a_late_loop_s_break_that_stands_with_the_lag_taken_off_is_the_server_s() -> None:
    """The H100's 88 requests/s hold (SGLang, 2026-12-06): sends 63 ms late at p99 with 1,017
    requests waiting. A TTFT p99 of seconds, or a queue that grows, is no busy client's doing; a
    TTFT p99 within the lag of its target may be."""
    targets = SloTargets(ttft_p99=1.0, itl_p99=0.05)
    late = {"client_late": True, "send_lag_p99": 0.063, "ttft_p99": 0.5, "itl_p99": 0.02, "error_rate": 0.0}
    for server, why in [({"ttft_p99": 11.3}, "ttft"), ({"ttft_p99_censored": 11.3}, "still waiting"), ({"itl_p99": 0.2}, "itl")]:
        level = {**late, **server}
        assert client_verdict(level, targets.violated(level), targets) is None, why
    grows = {**late, "growth": 19.4, "growth_ci": 3.7, "completion_rate": 67.2, "horizon_s": 420.0, "decisive": True}
    assert targets.violated(grows) and client_verdict(grows, targets.violated(grows), targets) is None
    for lag_s, level in [("ttft", {**late, "ttft_p99": 1.05}), ("itl", {**late, "itl_p99": 0.1})]:
        assert "ms late at p99" in str(client_verdict(level, targets.violated(level), targets)), lag_s


def test_an_arrival_due_at_the_windows_end_and_sent_a_moment_later_is_delivered() -> None:
    """Delivery is judged on the arrivals due in the window: at 1 request/s in a window of seconds,
    one due 2 ms before the end and sent 3 ms late made 5 of 6 (83 %) by send time, and the level
    "client-bound" (the real open-loop test, .ci/run idle at 07f4d90). A sender that falls behind
    is still client-bound."""
    due = [1.0, 1.9, 2.6, 3.4, 4.2, 4.998]
    on_time = [RequestRecord(ok=True, started=t, sent=t + 0.003, ttft=0.05, e2e=0.3) for t in due]
    figures = open_loop_figures(on_time, 0.5, 5.0, 1.0, 0, 0.0, schedule=due)
    assert figures["achieved_over_offered"] == 1.0 and not figures["client_bound"], figures
    behind = [RequestRecord(ok=True, started=t, sent=t + 0.4 * t, ttft=0.05, e2e=0.3) for t in due]  # lag grows
    figures = open_loop_figures(behind, 0.5, 5.0, 1.0, 0, 0.0, schedule=due)
    assert figures["achieved_over_offered"] == pytest.approx(4 / 6) and figures["client_bound"], figures


def test_one_arrival_missing_from_a_short_window_is_no_shortfall_and_more_than_3_percent_is() -> None:
    """A level is client-bound when more than 3 % of its due arrivals, and more than one, were not
    sent in time: 27 of 28 (96.4 %) is one request held up on a shared core, within the count's
    own spread; 26 of 28 is a sender behind. In a long window the 3 % decides, as before."""
    assert not short_of_schedule(28, 27) and short_of_schedule(28, 26)
    assert not short_of_schedule(200, 194) and short_of_schedule(200, 193)  # 3 % of 200 is 6
    assert not short_of_schedule(0, 0) and not short_of_schedule(5, 5) and short_of_schedule(5, 3)
    due = [0.5 + 4.0 * k / 28 for k in range(28)]  # 28 arrivals in a 4-s window, as the real SLO test's
    one_late = [
        RequestRecord(ok=True, started=t, sent=t + (0.3 if k == 9 else 0.002), ttft=0.05, e2e=0.3) for k, t in enumerate(due)
    ]
    one_late[-1] = RequestRecord(ok=True, started=due[-1], sent=4.6, ttft=0.05, e2e=0.3)  # and the last one past the end
    figures = open_loop_figures(one_late, 0.5, 4.5, 7.0, 0, 0.0, schedule=due)
    assert figures["achieved_over_offered"] == pytest.approx(27 / 28) and not figures["client_bound"], figures
    two_missing = [*one_late[:-2], RequestRecord(ok=True, started=due[-2], sent=4.7, ttft=0.05, e2e=0.3), one_late[-1]]
    figures = open_loop_figures(two_missing, 0.5, 4.5, 7.0, 0, 0.0, schedule=due)
    assert figures["achieved_over_offered"] == pytest.approx(26 / 28) and figures["client_bound"], figures


def test_a_drained_servers_climb_to_its_stable_count_is_no_growth() -> None:
    """A level starts on a drained server and its window opens when the first request ends; the
    count then still climbs for as long as the longest requests live. A stable queue (every
    request in the system its own lifetime, lognormal around 0.6 s with sigma 1, as an engine's
    spread) over 10-s windows at 32/s: its trend from the window's start covered no growth in 54
    of 100 seeds, and broke the SLO on growth alone ("shown to grow") in about 4 of 10 (the
    H100 search, 2026-12-06: 32/s broke so, 1.81 +- 1.7/s, then held 38.9/s for 7 minutes). From
    the lifetimes' p99 on, the interval covers no growth about as often as it says."""
    slo, covered, grew = SloTargets(ttft_p99=1.0), 0, 0
    for seed in range(100):
        rng = random.Random(seed)
        recs = []
        for t in itertools.takewhile(lambda t: t < 20.0, arrival_offsets(32.0, seed)):
            life = 0.6 * math.exp(rng.gauss(0.0, 1.0))
            recs.append(RequestRecord(ok=True, started=t, sent=t, ttft=0.05, e2e=life, stamps=[t + 0.05, t + life]))
        start = min(r.ended for r in recs if r.ended is not None)
        figures = {**summarize(recs, start, start + 10.0, 10, 2), **open_loop_figures(recs, start, start + 10.0, 32.0, seed, 0.0)}
        assert figures["growth_from_s"] > 0, figures
        covered += figures["growth"] - figures["growth_ci"] <= 0 <= figures["growth"] + figures["growth_ci"]
        grew += any(b.startswith("requests in the system grew") for b in slo.violated({**figures, "horizon_s": 420.0}))
    assert covered >= 85 and grew <= 12, (covered, grew)  # 95 % nominal; from the window's start: 54 and ~40


def test_completions_that_fall_behind_arrivals_break_the_slo() -> None:
    """A server that completes one request every 50 ms (20/s) under 30 arrivals/s: a queue grows
    by 10 a second, whatever the latency targets say."""
    recs = _records(30.0, 2, 40.0)
    free = 0.0
    for rec in recs:  # FIFO, one at a time, 50 ms each
        begin = max(rec.started, free)
        free = begin + 0.05
        rec.e2e, rec.ttft = free - rec.started, begin - rec.started + 0.01
    figures = {**_level_of(recs, 30.0, 2), "horizon_s": 600.0}
    assert figures["growth"] == pytest.approx(10.0, rel=0.2) and figures["growth"] - figures["growth_ci"] > 5, figures
    assert figures["completion_rate"] == pytest.approx(20.0, rel=0.05)
    slo = SloTargets(ttft_p99=100.0)  # 10 more a second at 20/s: 100 s more wait within 10 minutes
    assert any(b.startswith("requests in the system grew") for b in slo.violated(figures)), slo.violated(figures)
    assert slo.violated({**figures, "horizon_s": 60.0}) == []  # within a minute it would add 30 s: it holds that long


def test_a_growth_break_says_what_the_level_could_afford() -> None:
    """The H100's confirmation at 56/s (2026-12-07): its TTFT p99 over the target left no headroom,
    and the growth line read "> 0/s, what adds 0 s of wait"; now it says none was left and why."""
    slo = SloTargets(ttft_p99=1.0)
    level = {"growth": 0.19, "growth_ci": 0.18, "completion_rate": 55.4, "horizon_s": 420.0, "decisive": True}
    spare = next(b for b in slo.violated({**level, "ttft_p99": 0.9}) if "grew" in b)
    assert "> 0.013/s, what adds 0.1 s of wait within 420 s" in spare, spare
    none_left = [b for b in slo.violated({**level, "ttft_p99": 1.09}) if "grew" in b]
    assert none_left == ["requests in the system grew 0.19 +- 0.18/s > 0/s: its TTFT p99 1.09 s against 1 s leaves "
                         "no headroom, so any growth breaks it"], none_left  # fmt: skip
    timed = SloTargets(itl_p99=0.05)
    line = next(b for b in timed.violated({**level, "e2e_p99": 30.0, "request_timeout": 30.0}) if "grew" in b)
    assert "E2E p99 30 s against the 30-s timeout leaves no headroom" in line, line


def test_a_client_bound_rate_is_never_the_answer() -> None:
    """A server that holds any rate, senders that deliver only up to 5/s: the answer stays below
    the first rate they could not send, and the search says the limit was the client's."""

    async def measure(rate: float) -> dict[str, Any]:
        return {"ttft_p99": 0.1, "itl_p99": 0.01, "error_rate": 0.0, "output_tok_s": 10 * rate, "client_bound": rate > 5,
                "achieved_over_offered": 1.0 if rate <= 5 else 5 / rate}  # fmt: skip

    found = asyncio.run(search_rate(measure, SloTargets(ttft_p99=1.0), SloProbeSpec(mode="rate", start_rate=1.0, max_levels=8)))
    assert sorted(found.levels) == [1, 2, 4, 5, 5.5, 6, 8] and sorted(found.client_bound) == [5.5, 6, 8]
    assert found.held == 5 and found.broke is None  # bisected to 10 % below the client's limit, not the server's
    assert found.stop_reason.startswith("bracketed: 5 requests/s hold the SLO, 5.5 could not be sent (client-bound")


def _level(url: str, rate: float, *, cores: int, seconds: float = 3.0, tokens: int = 64) -> tuple[dict[str, Any], list[int]]:
    spec = LoadProbeSpec(prompt_tokens=8, output_tokens=tokens, duration=seconds, max_duration=seconds, warmup=1)
    probe = LoadProbe(spec)
    server = ServerHandle(url, "m", Capacity())

    async def run() -> tuple[dict[str, Any], list[int]]:
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            prompts = await probe.prompts(client, server)
        with Senders() as senders:
            summary = await probe.rate_level(senders, server, prompts, rate, seed=5, cores=cores)
            return summary, senders.pids()

    return asyncio.run(run())


@pytest.mark.integration
@pytest.mark.quiet  # it measures what one client core delivers: beside other tests the core is shared
def test_above_one_cores_ceiling_the_level_reaches_the_rate_or_records_its_shortfall(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three times one core's planned ceiling from one sender (``cores=1``): the level either
    delivers (>= 0.97 of its schedule, sends on time) or is recorded client-bound; an SLO search
    starting there never answers with it. Every sender process is gone afterwards."""
    rate = 3 * CEILING.rate(64)
    seen: list[tuple[list[RequestRecord], float, float]] = []

    def figures(records: list[RequestRecord], start: float, end: float, *args: Any) -> dict[str, Any]:
        seen.append((records, start, end))
        return open_loop_figures(records, start, end, *args)

    monkeypatch.setattr(load_module, "open_loop_figures", figures)
    with running(first_port=34000) as (url, _):
        summary, pids = _level(url, rate, cores=1)
        found = asyncio.run(search_rate(_replay(summary), LAX, SloProbeSpec(mode="rate", start_rate=rate, max_levels=2)))
    delivered, lag = summary["achieved_over_offered"], summary["send_lag_p99"]
    assert summary["senders"] == 1 and summary["errors"] == 0, summary
    assert summary["offered_rate"] == pytest.approx(rate, rel=0.15) and summary["rate"] == rate
    # on time is at most what was sent in the window and what was sent within the tolerated lag past
    # its end, counted from the level's own records (a saturated core sends in bursts: after a stall,
    # 3.5 % of the schedule went out in the 50 ms past the end, more than a smooth sender's share)
    records, start, end = seen[-1]
    assert [start, end] == list(summary["window_at"])  # the level's own window, not a slice's
    in_window = [r for r in records if not r.turn and start <= r.started < end]
    late = sum(1 for r in in_window if (at := delivered_at(r)) is not None and end <= at < end + SEND_LAG_MAX)
    sent, due = round(summary["achieved_rate"] * (end - start)), round(summary["offered_rate"] * (end - start))
    assert 0 < round(delivered * due) <= sent + late, (summary, late)
    short = short_of_schedule(due, round(delivered * due))
    assert summary["client_bound"] == short and summary["client_late"] == (lag > SEND_LAG_MAX), summary
    if summary["client_bound"]:
        assert found.held != rate and rate in found.client_bound, found.stop_reason
    for pid in pids:
        assert_group_gone(pid)


def _replay(first: dict[str, Any]) -> Any:
    """A measure that answers ``first`` for its rate and a delivered, held level below it."""

    async def measure(rate: float) -> dict[str, Any]:
        if rate == first["rate"]:
            return first
        return {"ttft_p99": 0.1, "error_rate": 0.0, "output_tok_s": rate, "client_bound": False}

    return measure


@pytest.mark.integration
@pytest.mark.quiet  # timing: the sender's delivery is measured
def test_below_the_ceiling_two_senders_deliver_the_schedule() -> None:
    """A rate that needs two senders gets two, and together they send the one schedule on time."""
    rate = 1.2 * CEILING.headroom * CEILING.rate(64)  # more than one sender plans for, well under two cores
    with running(first_port=34000) as (url, _):
        summary, _ = _level(url, rate, cores=2)
    assert summary["senders"] == 2, summary
    assert summary["achieved_over_offered"] >= DELIVERED_MIN and not summary["client_bound"], summary
    assert not summary["client_late"], summary
    assert summary["errors"] == 0 and summary["output_tok_s"] > 0


OVERLOAD_REQUESTS = 30  # capacity x window: at 8x the growth assertion missed 0 of 300 simulated levels at 1-4/s (the sim)


@pytest.mark.integration
@pytest.mark.quiet
def test_arrivals_above_a_real_servers_capacity_are_never_held(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    """llama-server with 2 slots on one thread completes 1-4 requests/s of 48/24 tokens, as fast as
    the machine is; at 8x that the backlog grows through the window, and the level breaks the SLO on
    it even where the latency targets would let it pass. The window lasts OVERLOAD_REQUESTS
    lifetimes' worth of the solo capacity (6-30 s): the growth's lower bound must clear half the
    arrivals' excess over completions, and a fixed 6-s window at 4x missed it on a machine that
    served 1.3 requests/s (16 arrivals in the trend's half; scripts/overload_growth_sim.py: 53 %)."""
    solo_spec = LoadProbeSpec(concurrency=[1], prompt_tokens=48, output_tokens=24, duration=6, max_duration=6, warmup=1)
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2}) as server:
        server.wait_ready()
        solo = levels_in(LoadProbe(solo_spec).run(handle(server)).details)["1"]
        assert solo.e2e_p50 is not None
        capacity = 2 / solo.e2e_p50  # two slots, each a request per lifetime
        seconds = min(max(OVERLOAD_REQUESTS / capacity, 6.0), 30.0)
        probe = LoadProbe(solo_spec.model_copy(update={"duration": seconds, "max_duration": seconds}))

        async def overload() -> dict[str, Any]:
            async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
                prompts = await probe.prompts(client, handle(server))
            with Senders() as senders:
                return await probe.rate_level(senders, handle(server), prompts, 8 * capacity, seed=11)

        level = asyncio.run(overload())
    assert not level["client_bound"], level
    assert level["completion_rate"] < 0.6 * level["achieved_rate"], level
    assert level["growth"] - level["growth_ci"] > 0.5 * level["achieved_rate"] - level["completion_rate"], level
    assert any(b.startswith("requests in the system grew") for b in LAX.violated({**level, "horizon_s": 600.0})), level


@pytest.mark.integration
def test_senders_end_when_the_process_that_started_them_is_killed(tmp_path: Path) -> None:
    """A probe killed with SIGKILL mid-level (no cleanup runs) leaves no sender behind: each sees
    its command pipe close, stops its requests and exits."""
    import signal

    from tuner.host import procfs

    script = tmp_path / "parent.py"
    script.write_text(
        "import asyncio, sys, time\n"
        "from tuner.probes._prompts import FixedSource\n"
        "from tuner.probes._senders import Plan, Senders\n"
        "async def main():\n"
        "    s = Senders()\n"
        "    url, source = 'http://127.0.0.1:9/v1/completions', FixedSource(str, None, 8)\n"
        "    plan = Plan(5.0, 1, 0.0, url, {}, 'completions', {}, source, 0, 8, 5.0)\n"
        "    await s.start(plan, 2, [], lambda: None)\n"
        "    print(' '.join(map(str, s.pids())), flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(procfs.stat(p) is not None for p in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any((st := procfs.stat(p)) is not None and not st.zombie for p in pids):
        time.sleep(0.1)
    alive = [p for p in pids if (st := procfs.stat(p)) is not None and not st.zombie]
    for pid in alive:  # never leave one behind, even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert alive == [], f"senders {alive} outlived the killed probe"


def _counted(url: str, window: list[float]) -> float:
    """Requests the server saw arrive in ``window`` (its own count, this machine's monotonic clock), per second."""
    arrivals = httpx.get(f"{url}/arrivals", timeout=10).json()["arrivals"]
    start, end = window
    return sum(1 for t in arrivals if start <= t < end) / (end - start)


@pytest.mark.integration
# timing: what one sender core delivers is measured, against a server on a core of its own; settled:
# beside the unit tests' start (CI, 2026-12-04: the 5th test on its worker) the server's core was
# shared, it read 80 requests/s while the sender wrote 680/s into its listen backlog, and the test
# compared the tool with a starved server. Alone (idle, a busy loop on the server's core, three
# unpinned busy loops) the two agreed within 0.1 %.
@pytest.mark.quiet(settled=True)
def test_the_achieved_rate_is_what_the_server_counted_also_from_a_saturated_sender_core() -> None:
    """A request counts as sent when its bytes are written, not when its task is created: below one
    core's ceiling and at three times it (one sender, its event loop saturated), the level's
    achieved rate is within 3 % of the arrivals the server itself counted in the same window."""
    from tuner.host.busy import busy_cores
    from tuner.serving.trial import pinned

    cores = sorted(os.sched_getaffinity(0))
    for rate in (0.5 * CEILING.headroom * CEILING.rate(64), 3 * CEILING.rate(64)):
        # the server on a core of its own, the idlest, never the bottleneck; the sender (and this
        # process) on the others: with the server on the core a busy loop held (37d7be9, hog) it
        # read 197.8 requests/s where the sender wrote 204.8
        shares = busy_cores(cores, 0.5)
        server_core = min(reversed(cores), key=lambda core: shares.get(core, 0.0))
        rest = tuple(core for core in cores if core != server_core) or (server_core,)
        with running(first_port=34000, core=server_core) as (url, _), pinned(rest):
            summary, _ = _level(url, rate, cores=1)
            server = _counted(url, summary["window_at"])
        assert summary["achieved_rate"] == pytest.approx(server, rel=0.03), (rate, server, summary["achieved_over_offered"])


def _hold(url: str, rate: float, ttft: float) -> tuple[dict[str, Any], list[str]]:
    """One hold level at ``rate`` (25 s, up to 75 s while its growth is undecided), as the SLO
    probe runs it before a rate becomes its answer: its figures and what it broke."""
    from tuner.probes import SloProbe

    load = LoadProbeSpec(prompt_tokens=8, output_tokens=16, duration=5, max_duration=5, warmup=5)
    targets = SloTargets(ttft_p99=ttft)
    slo = SloProbe(SloProbeSpec(mode="rate", hold=25, hold_max=75, horizon=600, targets=targets), load=load)
    window = slo.hold_window()
    server = ServerHandle(url, "m", Capacity())

    async def run() -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            prompts = await slo.load.prompts(client, server)
        with Senders() as senders:
            return await slo.load.rate_level(senders, server, prompts, rate, seed=3, window=window)

    level = slo.stamped(asyncio.run(run()), decisive=True)
    return level, targets.violated(level)


@pytest.mark.integration
@pytest.mark.quiet  # timing: a slow queue's growth against a sender that must keep its schedule
def test_a_queue_served_at_97_percent_of_the_offered_rate_is_never_held_and_one_at_80_percent_is() -> None:
    """A fault server that serves requests one after another at 48.5 a second, offered 50 a
    second: a queue grows by 1.5 a second, which a 10-second window shows as noise but which
    would add minutes of wait within a 10-minute confirmation. The hold level breaks on it (its
    TTFT target of 5 s would hold for its length). The same server at 62.5 a second (80 % busy)
    holds. (At 100 a second offered, the senders beside a busy loop on one of two cores once
    delivered under 97 % of the schedule: client-bound, not this test's question.)"""
    with running("--service", "48.5", first_port=34000) as (url, _):
        slow, broke = _hold(url, 50.0, ttft=5.0)
    with running("--service", "62.5", first_port=34000) as (url, _):
        fine, held = _hold(url, 50.0, ttft=5.0)
    seen = ("window_s", "growth", "growth_ci", "achieved_over_offered", "completion_rate", "send_lag_p99")
    assert not slow["client_bound"] and not fine["client_bound"], ({k: slow[k] for k in seen}, {k: fine[k] for k in seen})
    assert broke and slow["growth"] > 0.75, (broke, {k: slow[k] for k in seen})  # half its 1.5/s
    assert held == [] and abs(fine["growth"]) < 0.75, (held, {k: fine[k] for k in seen})


@pytest.mark.integration
@pytest.mark.quiet  # timing: a queue built and drained at a known rate
def test_a_level_after_one_that_broke_starts_on_a_drained_server() -> None:
    """An overloaded level leaves a queue behind on the server (here a fault server serving 40 a
    second first in, first out, offered 80 a second for 5 s: ~200 requests that go on being
    served after the client hung up). Before the next level the probe waits until a 1-token
    request is answered about as fast as on the idle server (this server keeps no count of what
    it has in flight): the wait is what the backlog needs, and after it the server is idle."""
    load = LoadProbeSpec(prompt_tokens=8, output_tokens=16, duration=5, max_duration=5, warmup=1)
    probe = LoadProbe(load)
    with running("--service", "40", first_port=34000) as (url, _):
        server = ServerHandle(url, "m", Capacity())

        async def run() -> tuple[dict[str, Any], dict[str, Any], float]:
            async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
                prompts = await probe.prompts(client, server)
                with Senders() as senders:
                    broke = await probe.rate_level(senders, server, prompts, 80.0, seed=1)
                settled = await probe.settle(client, server)
                began = time.perf_counter()
                await client.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 1})
                return broke, settled, time.perf_counter() - began

        broke, settled, after = asyncio.run(run())
    assert broke["growth"] > 20, broke  # arrivals 80/s, completions 40/s
    assert settled["drained"] is True and settled["drained_by"] == "1-token request", settled
    assert settled["drain_s"] > 1.0, settled  # the backlog took its time
    assert after < 0.5, after  # and the next request found the server idle
