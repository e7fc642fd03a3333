"""The SLO search: bracket by doubling, bisect to the answer, reuse what the load probe measured,
stop at the KV bound and within the level budget. The levels here are figures the test states (a
server whose p99 TTFT jumps past 5 clients); the real llama-server test is below."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import handle, llama_server_process
from tuner.base.level import Level, levels_in
from tuner.base.records import ProbeResult
from tuner.probes import LoadProbe, SloProbe
from tuner.probes.load import client_verdict, short_of_schedule
from tuner.probes.slo import Search, search, search_rate
from tuner.space import LoadProbeSpec, SloProbeSpec, SloTargets

TARGETS = SloTargets(ttft_p99=1.0, itl_p99=0.2)
# The real-server tests set the TTFT target from the server's own solo TTFT (median, one client), so
# that a slower or busier machine moves the target with the latencies. Measured here (2 cores, 2
# slots, one thread; p99 over the solo median, with and without a busy neighbour core). Closed
# loop, 32/64 tokens (3 runs): 2 clients 1.2-2.5, 3 clients 6.2-13 (the third waits for a slot: a
# whole request). Open loop, 48/24 tokens (4 runs): 1 request/s 0.9-2.0, 1.5/s 2.4-4.4, 2/s 1.5-3.5,
# 3/s 7-15 (past the ~1.9 requests/s the 2 slots serve, a queue grows), 4/s and more: a queue growing
# by 2 or more a second. One window per level is noisy near the target (at 5x, 2 of 6 runs bracketed
# a lucky 3/s, whose half then broke it): 8x puts the target where only a growing queue breaks it.
# The closed loop's target is the solo TTFT plus half a solo request's lifetime (CLOSED_LOOP_WAIT):
# a third client waits for a slot, up to a whole request. 3.8 x solo TTFT (the target until
# 8ddddd0) moved with the median of a 3-s solo window's few first tokens: on a noisy idle run it
# read 0.55 s, the target 2.08 s, and 3 clients held it. 2026-12-08, this machine, 2 runs idle and 2 beside a busy loop:
# 2 clients' TTFT p99 0.35-0.42 s, 3 clients' 1.64-2.01 s; the new target 0.76-1.14 s, the old 0.87-1.47.
CLOSED_LOOP_WAIT = 0.5  # x solo E2E, beside the solo TTFT
OPEN_LOOP_SLO = 8.0  # x solo TTFT: holds without a growing queue, breaks with one


def _server(knee: int, calls: list[int]) -> Any:
    async def measure(level: int) -> dict[str, Any]:
        calls.append(level)
        ttft = 0.1 if level <= knee else 2.0
        return {"ttft_p99": ttft, "itl_p99": 0.05, "error_rate": 0.0, "output_tok_s": 10.0 * min(level, knee)}

    return measure


def _search(knee: int, bound: int = 64, known: dict[int, dict[str, Any]] | None = None, **spec: Any) -> tuple[Any, list[int]]:
    calls: list[int] = []
    found = asyncio.run(search(_server(knee, calls), TARGETS, SloProbeSpec(**{"max_levels": 10, **spec}), bound, known or {}))
    return found, calls


def test_brackets_by_doubling_then_bisects_to_one_client() -> None:
    found, calls = _search(knee=5)
    assert calls == [1, 2, 4, 8, 6, 5]
    assert (found.held, found.broke) == (5, 6) and found.stop_reason == "bracketed: 5 clients hold the SLO, 6 break it"
    assert found.broken[6] == ["ttft_p99 2 > 1"]


def test_a_relative_resolution_stops_earlier() -> None:
    found, calls = _search(knee=40, resolution=0.2)
    assert calls == [1, 2, 4, 8, 16, 32, 64, 48, 40]
    assert (found.held, found.broke) == (40, 48)  # 48 - 40 <= 0.2 * 40: no finer level is worth a run


def test_the_kv_bound_holding_ends_the_search() -> None:
    found, calls = _search(knee=100, bound=12)
    assert calls == [1, 2, 4, 8, 12] and found.held == 12 and found.broke is None
    assert found.stop_reason.startswith("the bound (12 clients")


def test_levels_the_load_probe_measured_are_not_run_again() -> None:
    known = {1: {"ttft_p99": 0.1, "itl_p99": 0.05}, 4: {"ttft_p99": 0.1, "itl_p99": 0.05}, 16: {"ttft_p99": 3.0, "itl_p99": 0.05}}
    found, calls = _search(knee=9, known=known)
    assert 1 not in calls and 4 not in calls and 16 not in calls
    assert calls == [10, 7, 8, 9] and (found.held, found.broke) == (9, 10)


def test_one_client_breaking_the_slo_is_the_answer_zero() -> None:
    found, calls = _search(knee=0)
    assert calls == [1] and found.held == 0 and found.stop_reason == "even 1 client breaks the SLO"


def test_the_level_budget_is_kept() -> None:
    found, calls = _search(knee=37, max_levels=4)
    assert len(calls) == 4 and found.stop_reason.startswith("level budget spent (4 levels)")


def test_the_open_loop_answer_doubles_the_rate_then_bisects_to_ten_percent() -> None:
    calls: list[float] = []

    async def measure(rate: float) -> dict[str, Any]:  # a server whose TTFT p99 passes 1 s above 3.3 requests/s
        calls.append(rate)
        return {"ttft_p99": 0.2 if rate <= 3.3 else 1.5, "itl_p99": 0.05, "error_rate": 0.0, "output_tok_s": 40.0 * rate}

    spec = SloProbeSpec(mode="rate", start_rate=0.5, max_levels=8)
    found = asyncio.run(search_rate(measure, TARGETS, spec))
    assert calls == [0.5, 1.0, 2.0, 4.0, 3.0, 3.5, 3.25]
    assert (found.held, found.broke) == (3.25, 3.5) and found.stop_reason.startswith("bracketed: 3.25 requests/s hold")
    capped = asyncio.run(search_rate(measure, TARGETS, SloProbeSpec(mode="rate", start_rate=1.0, max_rate=3.0)))
    assert capped.held == 3.0 and capped.stop_reason == "max_rate (3 requests/s) holds the SLO"


def test_errors_and_unmeasured_latencies_break_the_slo() -> None:
    assert TARGETS.violated({"ttft_p99": 0.1, "itl_p99": 0.1, "error_rate": 0.01}) == ["error_rate 0.01 > 0"]
    assert TARGETS.violated({"ttft_p99": None, "itl_p99": 0.1}) == ["ttft_p99 unmeasured > 1"]
    with pytest.raises(ValueError, match="at least one of"):
        SloTargets(error_rate=0.0)


@pytest.mark.integration
@pytest.mark.quiet  # the same reason as the open-loop test below: at N the re-measurement broke the SLO (ci18)
def test_the_answer_holds_the_slo_and_one_more_client_breaks_it_on_a_real_llama_server(
    tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """llama-server with 2 slots on one core: a third client waits for a slot, its TTFT jumps by a
    whole request. The probe's answer N and N + 1 are then measured again, independently (fresh
    levels of a new load probe on the same server): N holds the SLO, N + 1 breaks it."""
    load = LoadProbeSpec(concurrency=[1], prompt_tokens=32, output_tokens=64, duration=3, max_duration=4, warmup=1)
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2}) as server:
        server.wait_ready()
        solo = _solo(server, load)
        alone = levels_in(solo.details)["1"]
        targets = SloTargets(ttft_p99=(alone.ttft_p50 or 0.0) + CLOSED_LOOP_WAIT * (alone.e2e_p50 or 0.0), error_rate=0.0)
        spec = SloProbeSpec(start=1, max_levels=6, targets=targets)
        probe = SloProbe(spec, load=load)
        probe.see([solo])  # the solo level is the load probe's, as in a trial: not run again
        result = probe.run(handle(server))
        n = int(result.metrics["concurrency"])
        again = LoadProbe(load.model_copy(update={"concurrency": [n, n + 1]})).run(handle(server))
    levels = levels_in(result.details)
    assert n >= 1 and result.metrics["concurrency_violated"] == n + 1, result.details
    assert result.metrics["goodput"] > 0 and result.metrics["ttft_p99"] <= targets.ttft_p99
    assert levels[str(n + 1)].broke and not levels[str(n)].broke
    assert result.metrics["levels"] <= 6 and result.details["stop_reason"].startswith("bracketed")
    at_n, above = (again.details["levels"][str(c)] for c in (n, n + 1))
    assert targets.violated(at_n) == [], at_n
    assert targets.violated(above), above


def _solo(server: Any, load: LoadProbeSpec) -> ProbeResult:
    """One client alone on ``server``: the load probe's level 1."""
    return LoadProbe(load.model_copy(update={"concurrency": [1]})).run(handle(server))


def _ttft_p50(solo: ProbeResult) -> float:
    """The median TTFT of one client alone (the real-server tests' SLO scales with it)."""
    return float(levels_in(solo.details)["1"].ttft_p50 or 0.0)


def test_the_h200_goodput_tune_replays_to_its_pick_and_the_bench_agrees(tmp_path: Path) -> None:
    """The committed H200 study (docs/goodput.md): the knee holds the SLO at 208 clients and breaks
    it at 224, every level within the budget; `vllm bench serve` on a fresh server met the SLO at
    208, missed it at 260, its throughput within 5 % of the tune's goodput."""
    import json
    import shutil

    import optuna

    from tests.conftest import ROOT
    from tuner.results.pick import pick

    data = ROOT / "docs" / "data" / "goodput"
    shutil.copy(data / "h200-vllm-goodput.db", tmp_path / "s.db")
    study = optuna.load_study(study_name="h200-vllm-goodput", storage=f"sqlite:///{tmp_path / 's.db'}")
    chosen = pick(study, "knee")
    m = chosen.trial.metrics
    assert chosen.number == 5 and (m["slo.concurrency"], m["slo.concurrency_violated"]) == (208, 224)
    levels = levels_in(chosen.trial.slo)
    assert [c for c, v in levels.items() if v.measured_here] == ["128", "192", "208", "224", "256"]
    assert levels["224"].broke == ("ttft_p99 1.19 > 1",) and m["slo.levels"] <= 6
    check = json.loads((data / "bench-40" / "crosscheck.json").read_text())
    at_n, above = check["bench"]
    assert (at_n["concurrency"], above["concurrency"]) == (208, 260) and not at_n["broke"] and above["broke"]
    assert abs(check["goodput_over_bench_at_n"] - 1) <= 0.05


@pytest.mark.integration
@pytest.mark.quiet(settled=True)  # its re-measurement is only comparable to the probe's on a machine as busy
# as it was: beside other tests, half the held rate broke the SLO (ci16) and twice the broken one held it (ci17);
# beside one_core tests on the other core, half the held rate broke it (ci32, unpinned) and, pinned to its core
# with its server and client, twice the broken rate held it (ci39, after the noise test); beside the unit tests
# (quiet, not settled), half the held rate broke it (ci50): on the whole machine again, after the unit tests
def test_the_open_loop_answer_on_a_real_llama_server(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    """Poisson arrivals: the probe brackets a request rate that holds the SLO; measured again, half
    of it holds and twice the rate that broke it breaks it (2 slots, one core). The server lives
    through it all under the space's 1 GiB memory cap, with no failed request: past saturation the
    probe queues arrivals on the client instead of opening a connection (a thread) each."""
    load = LoadProbeSpec(concurrency=[1], prompt_tokens=48, output_tokens=24, duration=3, max_duration=4, warmup=2)
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2}) as server:
        server.wait_ready()
        targets = SloTargets(ttft_p99=OPEN_LOOP_SLO * _ttft_p50(_solo(server, load)), error_rate=0.0)
        # a rate breaks the target only once its queue has kept a request waiting past it: every level,
        # the search's and the two checks', lasts twice the target. A slowed server's 8x solo TTFT was
        # 4.0 s, as long as the 4-s window: twice the broken rate, 28 requests still waiting, kept its
        # censored TTFT p99 under it (37d7be9, hog); with the checks alone longer, the search's 4-s
        # levels held 4/s, and half of it broke in 8.5 s (0776e4c, hog). Idle: 3-5 s (3-4 s before).
        longest = max(load.max_duration, 2 * (targets.ttft_p99 or 0.0))
        load = load.model_copy(update={"duration": max(load.duration, longest - 1), "max_duration": longest})
        again = LoadProbe(load)
        drained_before: dict[str, Any] = {}

        async def idle_prompts() -> Any:  # on the idle server: the 1-token time the drain compares with
            import httpx

            async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
                return await again.prompts(client, handle(server))

        prompts = asyncio.run(idle_prompts())
        # a search with no rate that broke says why: run alone once, 1/s "could not be sent" (5 of 6
        # arrivals: one due at the window's end sent a moment after it), since judged on the arrivals
        # due in the window (tuner.probes.load.open_loop_figures); .ci/run idle at 07f4d90 failed
        # here without saying why
        spec = SloProbeSpec(mode="rate", start_rate=1.0, max_levels=4, resolution=0.25, targets=targets)
        result = SloProbe(spec, load=load).run(handle(server))
        assert "rate_violated" in result.metrics, (result.details["stop_reason"], result.details["levels"])
        held, broke = result.metrics["rate"], result.metrics["rate_violated"]

        async def twice() -> tuple[dict[str, Any], dict[str, Any]]:
            import httpx

            from tuner.probes._senders import Senders

            async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
                # the probe's last level broke: its backlog drains first, judged as the probe judges it:
                # /slots at zero twice and a 1-token request as fast as on the idle server (/slots does
                # not show the requests waiting for a slot; behind them half the held rate broke, ci-hog2)
                drained_before.update(await again.settle(client, handle(server)))
                assert drained_before["drained"] is True, drained_before
            with Senders() as senders:
                return (
                    await again.rate_level(senders, handle(server), prompts, held / 2, seed=_even_seed(held / 2)),
                    await again.rate_level(senders, handle(server), prompts, broke * 2, seed=_even_seed(broke * 2)),
                )

        low, high = asyncio.run(twice())
    assert not server.died(), "the server died under the open loop (see its log)"
    assert 0 < held < broke and result.details["mode"] == "rate", result.details
    stored = levels_in(result.details).values()
    assert all(level.error_rate == 0 for level in stored), result.details
    assert result.metrics["goodput"] > 0 and result.metrics["levels"] <= 4
    # on failure, what the level saw: how long its warm-up took (a server slowed by a neighbour
    # queues the arrivals before the window opens), how it was drained, what ended and what waited
    seen = ("warmup_s", "requests", "waiting", "ttft_p50", "ttft_p99", "achieved_over_offered", "in_system_mean")
    assert targets.violated(low) == [], ({k: low.get(k) for k in seen}, drained_before, result.details)
    assert targets.violated(high), ({k: high.get(k) for k in seen}, result.details)
    for level in [*stored, Level.of(low), Level.of(high)]:  # every level sent what it reports
        due = round((level.offered_rate or 0) * (level.window_s or 0))
        assert not short_of_schedule(due, round((level.achieved_over_offered or 0) * due)) and not level.client_bound, level
    for level in stored:  # started drained: no slot busy, or a 1-token request as fast as idle
        assert level.drained is True, level


def _even_seed(rate: float, seconds: float = 8.0) -> int:
    """The first seed from 7 whose Poisson arrivals at ``rate`` number what the rate says in their
    first ``seconds`` (the warm-up and a short window), within 10 % (at least one): a level of
    seconds measures its opening, and seed 7 at 1/s opens with 13 arrivals in 5 s (2.6/s), which
    is no longer half the rate that held 2/s (the level broke in .ci/run, idle and beside a busy loop)."""
    import itertools

    from tuner.probes._senders import arrival_offsets

    expected = rate * seconds
    for seed in itertools.count(7):
        opening = sum(1 for _ in itertools.takewhile(lambda t: t < seconds, arrival_offsets(rate, seed)))
        if abs(opening - expected) <= max(1.0, 0.1 * expected):
            return seed
    raise AssertionError("unreachable")


ITL_BOUND = SloTargets(ttft_p99=1.0, itl_p99=0.05)


def _figures(rate: float, window: float, *, itl: float, growth: float, error_rate: float = 0.0) -> dict[str, Any]:
    """An open-loop level's figures at ``rate`` over ``window`` seconds (TTFT p99 0.1 s, a 7-minute horizon)."""
    return {
        "ttft_p99": 0.1, "itl_p99": itl, "error_rate": error_rate, "output_tok_s": 100 * rate, "window_s": window,
        "growth": growth, "growth_ci": 0.5, "completion_rate": rate, "horizon_s": 420.0,
    }  # fmt: skip


def _growth_server(calls: list[tuple[str, float]], holds_at: float) -> tuple[Any, Any]:
    """A server whose latencies hold up to 31 requests/s (ITL p99 breaks above), whose 10-s levels
    from 28 up read a growing queue (one stall at a window's end), and whose holds at or below
    ``holds_at`` read it flat (the stall averaged out)."""

    async def measure(rate: float) -> dict[str, Any]:
        calls.append(("level", rate))
        return _figures(rate, 10.0, itl=0.03 if rate <= 31 else 0.09, growth=1.0 if rate >= 28 else 0.0)

    async def hold(rate: float) -> dict[str, Any]:
        calls.append(("hold", rate))
        growth = 0.0 if rate <= holds_at else 0.5
        return {**_figures(rate, 120.0, itl=0.03 if rate <= 31 else 0.09, growth=growth), "decisive": True}

    return measure, hold


def test_a_level_that_broke_on_its_growth_alone_is_held_before_it_bounds_the_answer() -> None:
    calls: list[tuple[str, float]] = []
    measure, hold = _growth_server(calls, holds_at=31)
    found = asyncio.run(search_rate(measure, ITL_BOUND, SloProbeSpec(mode="rate", start_rate=32, max_levels=8), hold=hold))
    assert [c for c in calls if c[0] == "level"] == [("level", r) for r in (32, 16, 24, 28, 26, 30)]
    assert [c for c in calls if c[0] == "hold"] == [("hold", 28), ("hold", 30), ("hold", 32)]  # each short break held
    assert found.answer == 30 and found.broke == 32 and found.broken[32][0] == "held 120s: itl_p99 0.09 > 0.05"
    assert "28 requests/s broke in 10s (requests in the system grew 1 +- 0.5/s" in found.stop_reason
    assert "then held 120s on the same server" in found.stop_reason


def test_a_growth_only_break_whose_hold_breaks_too_bounds_the_answer() -> None:
    calls: list[tuple[str, float]] = []
    measure, hold = _growth_server(calls, holds_at=27)
    found = asyncio.run(search_rate(measure, ITL_BOUND, SloProbeSpec(mode="rate", start_rate=32, max_levels=8), hold=hold))
    assert [c for c in calls if c[0] == "hold"] == [("hold", 28), ("hold", 26)]
    assert found.answer == 26 and found.broke == 28
    assert found.broken[28][0].startswith("held 120s: requests in the system grew")
    assert "did not hold 120s either" in found.stop_reason


def _latency_server(calls: list[tuple[str, float]], stall_to: float, error_from: float = float("inf")) -> tuple[Any, Any]:
    """A server whose queue never grows and whose ITL p99 breaks from 32 requests/s in a 10-s
    level, in a hold only above ``stall_to`` (a stall in the short window), and whose requests
    fail from ``error_from``."""

    def figures(rate: float, window: float, itl: float) -> dict[str, Any]:
        return _figures(rate, window, itl=itl, growth=0.0, error_rate=0.01 if rate >= error_from else 0.0)

    async def measure(rate: float) -> dict[str, Any]:
        calls.append(("level", rate))
        return figures(rate, 10.0, 0.061 if rate >= 32 else 0.03)

    async def hold(rate: float) -> dict[str, Any]:
        calls.append(("hold", rate))
        return {**figures(rate, 60.0, 0.061 if rate > stall_to else 0.03), "decisive": True}

    return measure, hold


def test_a_level_that_broke_a_latency_target_in_its_short_window_is_held_before_it_bounds_the_answer() -> None:
    calls: list[tuple[str, float]] = []
    measure, hold = _latency_server(calls, stall_to=40)  # a stall: 32 holds its ITL target over a minute
    found = asyncio.run(search_rate(measure, ITL_BOUND, SloProbeSpec(mode="rate", start_rate=32, max_levels=8), hold=hold))
    assert [c for c in calls if c[0] == "hold"] == [("hold", 32), ("hold", 40), ("hold", 48)]
    assert found.answer == 40 and found.broke == 48  # 40 held its minute; 48 did not (the hold's window decides)
    assert "32 requests/s broke in 10s (itl_p99 0.061 > 0.05), then held 60s on the same server" in found.stop_reason


def test_a_latency_break_whose_hold_breaks_too_bounds_the_answer() -> None:
    calls: list[tuple[str, float]] = []
    measure, hold = _latency_server(calls, stall_to=31)
    found = asyncio.run(search_rate(measure, ITL_BOUND, SloProbeSpec(mode="rate", start_rate=32, max_levels=8), hold=hold))
    assert [c for c in calls if c[0] == "hold"] == [("hold", 32), ("hold", 30)]
    assert found.answer == 30 and found.broke == 32 and found.broken[32] == ["held 60s: itl_p99 0.061 > 0.05"]
    assert "32 requests/s broke in 10s (itl_p99 0.061 > 0.05) and did not hold 60s either" in found.stop_reason


class _Unmeasured(Exception):
    """A level or hold the committed tune never ran."""


def _committed(session: str) -> tuple[Path, dict[str, Any]]:
    """A committed SGLang tune's folder (docs/data/goodput/<session>) and its trial's stored attrs."""
    import optuna

    from tests.conftest import ROOT

    data = ROOT / "docs" / "data" / "goodput" / session
    study = optuna.load_study(study_name="h200-sglang-goodput-rate", storage=f"sqlite:///{data / 'tune' / 'study.db'}")
    return data, study.trials[0].user_attrs


def _replay(stored: dict[str, Any], calls: list[tuple[str, float]], unstored_level: str | None = None, holds: int = 3) -> Search:
    """The committed tune's levels and holds replayed through the open-loop search (its space's
    spec and SLO at the time: 3 holds, else ``holds``); a level it did not store reads as
    ``unstored_level``'s, a hold it did not run raises :class:`_Unmeasured`."""

    async def measure(rate: float) -> dict[str, Any]:
        calls.append(("level", rate))
        key = f"{rate:g}" if unstored_level is None or f"{rate:g}" in stored["levels"] else unstored_level
        return dict(stored["levels"][key])

    async def hold(rate: float) -> dict[str, Any]:
        calls.append(("hold", rate))
        if f"{rate:g}" not in stored["holds"]:
            raise _Unmeasured(rate)
        return dict(stored["holds"][f"{rate:g}"])

    spec = SloProbeSpec(mode="rate", start_rate=32, max_levels=7, resolution=0.1, hold=60, hold_max=180, holds=holds)
    return asyncio.run(search_rate(measure, ITL_BOUND, spec, hold=hold))


def _until_unmeasured(stored: dict[str, Any], unstored_level: str | None = None, holds: int = 3) -> list[tuple[str, float]]:
    """The calls of a replay (:func:`_replay`) up to the hold the committed tune never ran, which ends it."""
    calls: list[tuple[str, float]] = []
    with pytest.raises(_Unmeasured):
        _replay(stored, calls, unstored_level, holds)
    return calls


def test_the_h100_search_replays_to_80_with_88_the_server_s_break() -> None:
    """The committed H100 tune (docs/goodput.md, sixth session; SGLang 0.5.17): its levels and holds
    replayed through the search. 88/s broke in 10 s, its hold broke too (TTFT p99 11.3 s, 1,017
    waiting, queue +19.4/s) with sends 63 ms late at p99; that break is the server's, not the
    client's, so the answer is 80 with 88 breaking it (stored at the time: "88 could not be sent").
    SGLang's bench at 92/s broke (TTFT p99 76 s). Replayed now, 88's hold is not run: its 10-s
    level completed 59.2/s of 90 sent (saturated), what its hold read again over a minute."""
    import json

    data, attrs = _committed("h100-sglang-2026-12-06e")
    stored = attrs["slo"]
    calls: list[tuple[str, float]] = []
    found = _replay(stored, calls)
    assert calls == [*(("level", r) for r in (32, 64, 128, 96, 80, 88)), ("hold", 80)]
    assert found.answer == 80 and found.broke == 88 and not found.client_bound and found.saturated(88, 0.1)
    hold_88 = stored["holds"]["88"]
    assert client_verdict(hold_88, ITL_BOUND.violated(hold_88), ITL_BOUND) is None  # the late sends: the server's break
    assert found.stop_reason.startswith("bracketed: 80 requests/s hold the SLO, 88 break it")
    check = json.loads((data / "bench-above" / "crosscheck-above.json").read_text())
    assert check["bench"][0]["rate"] == 92 and check["bench"][0]["ttft_p99"] > 60 and check["host"]["cpus"] == 16


def _saturating_server(calls: list[tuple[str, float]], holds_to: float) -> tuple[Any, Any]:
    """SGLang on a slower H100, as its tunes read it: a 10-s level at 32 requests/s reads one stall
    (ITL p99 61 ms), the 10-s levels up to 52 hold, from 56 the server saturates (it completes half
    of what it is sent); over a minute only rates up to ``holds_to`` hold."""

    async def measure(rate: float) -> dict[str, Any]:
        calls.append(("level", rate))
        figures = _figures(rate, 10.0, itl=0.061 if rate == 32 else 0.03, growth=0.0)
        if rate >= 56:
            figures.update(completion_rate=rate / 2, achieved_rate=rate, ttft_p99_censored=3.0)
        return figures

    async def hold(rate: float) -> dict[str, Any]:
        calls.append(("hold", rate))
        return {**_figures(rate, 60.0, itl=0.03 if rate <= holds_to else 0.09, growth=0.0), "decisive": True}

    return measure, hold


def test_the_answer_is_the_largest_level_whose_hold_held_not_a_short_level_above_it() -> None:
    """32 breaks short, 16-30 hold, 32 holds its minute; 64 and 56 saturate, 48 holds 10 s: the level
    budget (8) is spent. The last of two holds bisects 32-56 at 44 and holds. The answer is 44: 48,
    which only a 10-s window read as held, is none (stored before: "2 hold(s) spent, none held: no
    answer", 44's minute thrown away)."""
    calls: list[tuple[str, float]] = []
    measure, hold = _saturating_server(calls, holds_to=45)
    spec = SloProbeSpec(mode="rate", start_rate=32, max_levels=8, resolution=0.1, holds=2)
    found = asyncio.run(search_rate(measure, ITL_BOUND, spec, hold=hold))
    assert calls == [
        *(("level", r) for r in (32, 16, 24, 28, 30)),
        ("hold", 32),
        *(("level", r) for r in (64, 48, 56)),
        ("hold", 44),
    ]
    assert found.held == 48 and found.answer == 44, found.stop_reason
    assert found.stop_reason.endswith("; 2 hold(s) spent: 44 requests/s, whose hold held, is the answer")


def test_a_hold_that_breaks_within_a_resolution_above_one_that_held_leaves_the_held_one_the_answer() -> None:
    """Four holds: 32 held, 48 broke, 37.6 held, then 40.4 (the middle of 37.6-43.2) broke. The
    search stays a resolution below a broken hold (36.4 here) only where no hold held in between: 37.6
    held its minute, so 40.4 itself bounds the bracket and the answer is 37.6 (was 32: the
    resolution below 40.4 put the held 37.6 out of the bracket)."""
    calls: list[tuple[str, float]] = []
    measure, hold = _saturating_server(calls, holds_to=40)
    spec = SloProbeSpec(mode="rate", start_rate=32, max_levels=7, resolution=0.1, holds=4)
    found = asyncio.run(search_rate(measure, ITL_BOUND, spec, hold=hold))
    holds = [32, 48, pytest.approx(37.6), pytest.approx(40.4)]
    assert [c for c in calls if c[0] == "hold"] == [("hold", h) for h in holds]
    assert found.answer == pytest.approx(37.6) and found.reach is not None and found.reach == pytest.approx(48 * 0.9)
    assert found.stop_reason.startswith("bracketed: 37.6 requests/s hold the SLO, 40.4 break it"), found.stop_reason


def test_a_level_where_requests_failed_is_not_held_again() -> None:
    calls: list[tuple[str, float]] = []
    measure, hold = _latency_server(calls, stall_to=40, error_from=32)
    found = asyncio.run(search_rate(measure, ITL_BOUND, SloProbeSpec(mode="rate", start_rate=32, max_levels=8), hold=hold))
    assert [c for c in calls if c[0] == "hold"] == [("hold", 30)] and found.answer == 30 and found.broke == 32


def test_the_slower_h100_search_stays_under_what_a_broken_hold_completed_and_stops_when_no_hold_is_left() -> None:
    """The committed tune on an H100 host whose cores ran Python at 0.47x the sixth session's
    (docs/goodput.md, seventh session; SGLang 0.5.17, the same space): 48 and 52 requests/s held
    their 10-s levels and broke over a minute (the engine fell to 36-40 completions/s), 56's hold
    broke too, and the three holds (56, 52, 48) were spent with none held: no answer. Replayed now:
    52's hold completed 36.4/s of 53.2 sent, so the search stays a resolution under that, 32.8
    (not under 46.8, a resolution below 52), and the bracket is closed: the second hold goes to 32.
    Had it broken too (completing 39.5/s as 48's hold did), the third goes under 28.8 after two more
    levels, and where it broke as well, no answer and nothing after it."""
    _, attrs = _committed("h100-sglang-2026-12-06f")
    stored = attrs["slo"]
    assert attrs["host"]["loop_ms"] > 2 * 15.28  # the sixth session's host: 15.28 ms
    calls = _until_unmeasured(stored, unstored_level="40")
    assert calls == [*(("level", r) for r in (32, 64, 48, 56, 52)), ("hold", 52), ("hold", 32)]  # 56: saturated, not held

    stored["holds"]["32"] = stored["holds"]["48"]
    calls = _until_unmeasured(stored, unstored_level="40")
    assert calls[7:] == [("level", pytest.approx(14.4)), ("level", pytest.approx(21.6)), ("hold", pytest.approx(21.6))]
    stored["holds"]["21.6"] = stored["holds"]["48"]
    calls.clear()
    found = _replay(stored, calls, unstored_level="40")
    assert [c for c in calls if c[0] == "hold"] == [("hold", 52), ("hold", 32), ("hold", pytest.approx(21.6))]
    assert found.answer == 0 and found.stop_reason.endswith("3 hold(s) spent, none held: no answer"), found.stop_reason


def test_a_wide_bracket_holds_the_answer_before_the_level_far_above_and_a_hold_left_bisects_it() -> None:
    """The committed tune of the eighth session (docs/goodput.md; SGLang 0.5.17, the same space, an
    H100 host): 32 requests/s broke its 10-s level on ITL p99 alone (60 ms > 50) and held 180 s;
    then 64 broke and 48 held 10 s, the level budget spent. The search then held 64 (its queue grew
    51.6 +- 8.5/s: broke) and 48 (broke, 43.1/s completed): three holds, the answer 32 with nothing
    learnt between 32 and 43. Replayed now: 64 is not held (it completed 19.3/s of 65.7 sent:
    saturated); a hold bisects 32-64 at 48, it breaks having completed 43.1/s of 48.1 sent, and the
    hold left bisects 32-38.8 (a resolution under what 48's hold completed, not under 48) at 35.4, a
    level the tune never measured. Had it held, 35.4 is the answer; had it broken, 32."""
    _, attrs = _committed("h100-sglang-2026-12-07")
    stored = attrs["slo"]
    assert attrs["metrics"]["slo.rate"] == 32 and [*stored["holds"]] == ["32", "48", "64"]
    calls = _until_unmeasured(stored)
    assert calls == [
        *(("level", r) for r in (32, 16, 24, 28, 30)),
        ("hold", 32),
        ("level", 64),
        ("level", 48),
        ("hold", 48),
        ("hold", pytest.approx((32 + 0.9 * 43.0826) / 2, rel=1e-4)),  # under what 48's hold completed (43.1/s of 48.1)
    ]
    middle = calls[-1][1]

    stored["holds"][f"{middle:g}"] = {**stored["holds"]["32"], "rate": middle}  # had it held
    calls.clear()
    found = _replay(stored, calls)
    assert calls[-1] == ("hold", middle) and found.answer == middle and found.broke == 48
    assert f"the bracket 32-38.7743 requests/s bisected by a hold: {middle:g} held 180s" in found.stop_reason, found.stop_reason

    stored["holds"][f"{middle:g}"] = stored["holds"]["48"]  # had it broken: 32
    calls.clear()
    found = _replay(stored, calls)
    assert len([c for c in calls if c[0] == "hold"]) == 3 and found.answer == 32
    assert found.stop_reason.startswith("level budget spent (7 levels): 32 requests/s hold the SLO"), found.stop_reason


def test_the_eleventh_tune_ran_as_the_eighth_s_replay_said_and_replays_to_its_answer() -> None:
    """The eleventh session's tune (docs/goodput.md; SGLang 0.5.17, the same space, an H100 host like
    the eighth's, at 28f35b4) ran the levels and holds that the eighth session's tune, replayed,
    said it would (the test above): 32 broke its 10-s level on its queue's growth (0.97 +- 0.73/s
    against 0.032/s) with 95 % of its arrivals completed; 16-30 held; 32 held 60 s; 64 broke
    (saturated), 48 held 10 s; a hold bisected 32-64 at 48 and broke (TTFT p99 1.51 s, every
    request completed), the last bisected 32-43.2 at 37.6 and held 140 s. Replayed, every level
    and hold is stored and the answer is 37.6. SGLang's bench then held 37.6 for 5 minutes and
    43.24 (1.15 x) for 2."""
    import json

    data, attrs = _committed("h100-sglang-2026-12-07b")
    stored = attrs["slo"]
    calls: list[tuple[str, float]] = []
    found = _replay(stored, calls)
    assert calls == [
        *(("level", r) for r in (32, 16, 24, 28, 30)),
        ("hold", 32),
        *(("level", r) for r in (64, 48)),
        ("hold", 48),
        ("hold", pytest.approx(37.6)),
    ]
    assert found.answer == pytest.approx(37.6) == attrs["metrics"]["slo.rate"] and found.broke == 48
    assert found.saturated(64, 0.1) and not found.saturated(32, 0.1)
    assert "the bracket 32-43.2 requests/s bisected by a hold: 37.6 held 140s" in found.stop_reason, found.stop_reason
    bench = json.loads((data / "bench" / "crosscheck.json").read_text())["bench"]
    assert [(b["rate"], b["broke"]) for b in bench] == [(37.6, []), (43.24, [])]  # 1.15 x held: the answer is not tight

    # with the space's 4 holds now, the fourth bisects 37.6-43.2 at 40.4, which no tune has run
    calls = _until_unmeasured(stored, holds=4)
    holds = [c for c in calls if c[0] == "hold"]
    assert holds == [("hold", 32), ("hold", 48), ("hold", pytest.approx(37.6)), ("hold", pytest.approx(40.4))]


def test_the_twelfth_tune_s_holds_above_what_the_server_completed_are_no_longer_run() -> None:
    """The twelfth session's tune (docs/goodput.md; the space's 4 holds, an H100 like the eleventh's,
    at f42e871): 32 held its 10-s level, 64 broke, 48, 56 and 60 read held in 10 s; the holds went
    down from the top, 60, 56 and 48, each breaking with its server behind its arrivals (47.6, 48.3
    and 43.0 completed per second); then 37.6 and 40.4 held their 10-s levels and the fourth hold,
    40.4, held 142 s: the answer 40.4. On the same machine SGLang's bench then broke 40.4 over 5
    minutes (TTFT p99 7.1 s; the server's running requests passed the graph cap after about a minute
    and stayed) and 46.46, and the tool's own confirmation broke at its fourth minute: a hold that
    held is no proof of minutes where the engine tips. Replayed now: 60's hold completed 47.6/s, so
    the search stays under 42.8 at once; two levels bisect 32-42.8 and the second hold goes to
    40.1: two holds where the tune spent four (the levels it never ran read as 40.4's)."""
    import json

    data, attrs = _committed("h100-sglang-2026-12-07c")
    stored = attrs["slo"]
    assert attrs["metrics"]["slo.rate"] == pytest.approx(40.4) and [*stored["holds"]] == ["40.4", "48", "56", "60"]
    calls = _until_unmeasured(stored, unstored_level="40.4", holds=4)
    assert calls == [
        *(("level", r) for r in (32, 64, 48, 56, 60)),
        ("hold", 60),
        ("level", pytest.approx(37.40, abs=0.01)),
        ("level", pytest.approx(40.11, abs=0.01)),
        ("hold", pytest.approx(40.11, abs=0.01)),
    ]
    stored["holds"][f"{calls[-1][1]:g}"] = stored["holds"]["40.4"]  # had it held as 40.4 did
    found = _replay(stored, [], unstored_level="40.4", holds=4)
    assert found.answer == pytest.approx(40.11, abs=0.01) and len(found.holds) == 2
    said = "the search stays under 42.8, a resolution below the 47.6 requests/s that 60's hold completed"
    assert said in found.stop_reason, found.stop_reason
    bench = json.loads((data / "bench" / "crosscheck.json").read_text())["bench"]
    assert [(b["rate"], bool(b["broke"])) for b in bench] == [(pytest.approx(40.4), True), (46.46, True)]
    (run,) = [json.loads(line) for line in (data / "confirm" / "confirm-runs.jsonl").read_text().splitlines()]
    assert run["at"] == pytest.approx(40.4) and not run["held"] and run["ended_early"], run["broke"]


def test_a_search_whose_holds_all_broke_says_no_answer_first() -> None:
    """A search whose holds all broke said "bracketed: 48 requests/s hold the SLO ...; 3 hold(s)
    spent, none held: no answer", its opening the short levels' reading written before 48's hold
    broke. The slower H100's committed tune, its 32 read as broken too, ends so."""
    _, attrs = _committed("h100-sglang-2026-12-06f")
    stored = attrs["slo"]
    for level in ("32", "21.6"):
        stored["holds"][level] = stored["holds"]["48"]
    found = _replay(stored, [], unstored_level="40")
    assert not found.answer and found.stop_reason.startswith("no answer, no hold held (the short levels read first): ")
    assert found.stop_reason.endswith("3 hold(s) spent, none held: no answer"), found.stop_reason


def test_the_h200_tune_holds_no_saturated_level_and_its_holds_left_bisect_the_open_bracket() -> None:
    """The ninth session's tune on an H200 (docs/goodput.md; SGLang 0.5.17, the same space, at
    dc1adcb): 32 and 64 held their 10-s levels, 128, 96, 80 and 72 broke, 68 held. The search held
    72 (it had completed 36.9/s of 75.2 sent; broke), 68 (broke: ITL p99 56 ms, a queue growing
    3.3 +- 2.9/s) and, its last hold, 32 (held 70 s): the answer 32, with 64's 10-s level held
    and nothing between 32 and 61.2 held over a minute. 32 then held its 7-minute confirmation.
    Replayed now: 72 is not held (saturated), 68's hold breaks, and the two holds left bisect
    32-61.2, first at 46.6, a level no window measured; had it broken, the last goes to 32."""
    _, attrs = _committed("h200-sglang-2026-12-07")
    stored = attrs["slo"]
    assert attrs["metrics"]["slo.rate"] == 32 and [*stored["holds"]] == ["32", "68", "72"]
    calls = _until_unmeasured(stored)
    assert calls == [*(("level", r) for r in (32, 64, 128, 96, 80, 72, 68)), ("hold", 68), ("hold", pytest.approx(46.6))]

    stored["holds"]["46.6"] = stored["holds"]["68"]
    calls.clear()
    found = _replay(stored, calls)
    assert calls[-1] == ("hold", 32) and found.answer == 32 and found.stop_reason.endswith("; held 70s on the same server")


def test_a_closed_loop_hold_that_breaks_sends_the_search_a_resolution_below_it() -> None:
    """Clients: the short levels read up to 39 as held, holds break from 37. 40 broke short and
    its hold broke; 38's hold broke, so the search stays under 38 - 3 (its resolution, 10 %): the
    next hold is 34, not 36 a short level had read as held right under 38."""
    calls: list[tuple[str, int]] = []

    async def measure(clients: int) -> dict[str, Any]:
        calls.append(("level", clients))
        return {"ttft_p99": 0.1 if clients < 40 else 2.0, "itl_p99": 0.01, "error_rate": 0.0, "output_tok_s": 10.0 * clients}

    async def hold(clients: float) -> dict[str, Any]:
        calls.append(("hold", int(clients)))
        return {"ttft_p99": 0.1 if clients <= 36 else 2.0, "itl_p99": 0.01, "error_rate": 0.0, "window_s": 60.0}

    spec = SloProbeSpec(start=8, resolution=0.1, max_levels=12)
    found = asyncio.run(search(measure, TARGETS, spec, 1000, {}, hold=hold))
    assert [c for kind, c in calls if kind == "hold"] == [40, 38, 34] and found.answer == 34, calls
    assert found.stop_reason.startswith("bracketed: 34 clients hold the SLO, the search stays under 36, a resolution below 38")


def test_a_hold_gets_what_the_trial_s_limit_leaves_and_none_where_its_least_does_not_fit() -> None:
    from tuner.base import clock
    from tuner.probes.load import Window
    from tuner.probes.slo import HOLD_TAIL_S, _fitted

    window = Window(60.0, 180.0, ci=False)
    assert _fitted(window) == window  # no limit bound: as the space asks
    with clock.limit(150.0):
        fitted = _fitted(window)
        assert fitted is not None and fitted.least == 60 and 150 - HOLD_TAIL_S - 1 < fitted.most <= 150 - HOLD_TAIL_S
    with clock.limit(1000.0):
        assert _fitted(window) == window
    with clock.limit(60.0 + HOLD_TAIL_S - 1):
        assert _fitted(window) is None


def test_a_hold_with_no_time_left_is_not_run_and_the_stop_reason_says_so() -> None:
    """The answer's own hold without time: no answer (a level becomes one only by holding), every
    level kept. The answer held and the next hold without time: the answer stands."""
    calls: list[tuple[str, float]] = []
    measure, _ = _latency_server(calls, stall_to=40)
    spec = SloProbeSpec(mode="rate", start_rate=32, max_levels=8)

    async def no_time(rate: float) -> None:
        calls.append(("no time", rate))
        return None

    found = asyncio.run(search_rate(measure, ITL_BOUND, spec, hold=no_time))
    assert calls[-1] == ("no time", 32) and found.answer == 0 and found.held == 30 and len(found.levels) == 5
    assert found.stop_reason.endswith("; no time was left for a hold at 32 before the trial's limit"), found.stop_reason

    calls.clear()
    _, hold = _latency_server(calls, stall_to=40)

    async def once(rate: float) -> dict[str, Any] | None:
        return await hold(rate) if not any(kind == "hold" for kind, _ in calls) else await no_time(rate)

    found = asyncio.run(search_rate(measure, ITL_BOUND, spec, hold=once))
    assert [c for c in calls if c[0] != "level"] == [("hold", 32), ("no time", 40)] and found.answer == 32
    assert "then held 60s on the same server; no time was left for a hold at 40" in found.stop_reason, found.stop_reason


def test_a_level_with_no_time_left_is_not_run_and_the_search_keeps_what_it_measured() -> None:
    """A level runs only where its longest window ends before the trial's limit (a trial cut at its
    limit keeps nothing): the search stops there with the levels it has, and says why."""
    from tuner.base import clock
    from tuner.probes.slo import HOLD_TAIL_S

    probe = SloProbe(SloProbeSpec(), LoadProbeSpec(duration=5.0, max_duration=10.0))
    assert probe._level_fits()  # no limit bound
    with clock.limit(10.0 + HOLD_TAIL_S + 1):
        assert probe._level_fits()
    with clock.limit(10.0 + HOLD_TAIL_S - 1):
        assert not probe._level_fits()

    calls: list[int] = []
    inner = _server(5, calls)

    async def until_late(level: int) -> dict[str, Any] | None:
        return await inner(level) if len(calls) < 3 else None

    found = asyncio.run(search(until_late, TARGETS, SloProbeSpec(max_levels=10), 64, {}))
    assert calls == [1, 2, 4] and found.held == 4 and found.late == 8, (calls, found.late)
    assert found.stop_reason == "no time was left for a level at 8 before the trial's limit: 4 clients hold the SLO"

    measured: list[float] = []

    async def rate_until_late(rate: float) -> dict[str, Any] | None:
        if len(measured) == 3:
            return None
        measured.append(rate)
        return {"ttft_p99": 0.1 if rate < 100 else 2.0, "itl_p99": 0.05, "error_rate": 0.0, "output_tok_s": rate}

    found = asyncio.run(search_rate(rate_until_late, TARGETS, SloProbeSpec(mode="rate", start_rate=32, max_levels=8)))
    assert measured == [32, 64, 128] and found.held == 64 and found.late == 96, (measured, found.late)
    assert found.stop_reason == (
        "no time was left for a level at 96 before the trial's limit: 64 requests/s hold the SLO, 128 break it"
    ), found.stop_reason


def test_the_stop_reason_names_the_levels_past_the_graph_cap() -> None:
    """An open-loop level or hold whose requests in the system passed the most its config decodes
    on CUDA graphs is named with its count; under the cap, or with no cap, nothing is added."""
    from tuner.probes.slo import past_fast_path

    found = Search(SloTargets(ttft_p99=1.0), {})
    found.levels = {32.0: {"in_system_max": 39}, 48.0: {"in_system_max": 131}}
    found.holds = {48.0: {"in_system_max": 252}, 40.4: {"in_system_max": 63}}
    said = past_fast_path(found, 128)
    assert (
        said
        == "; past the 128 running requests this config decodes on CUDA graphs: 131 at 48, 252 at 48 (hold) in the system at once"
    )
    assert past_fast_path(found, 256) == "" and past_fast_path(found, None) == ""
