"""SLO probe: the largest load a running server holds within the objective set's SLO.

Throughput at one fixed concurrency answers "how fast at 128 clients"; operators size fleets by
"how many concurrent users does this config serve with p99 TTFT <= X and p99 inter-token latency
<= Y, and at what throughput". This probe answers that on the running server, with the load
probe's workload and steady-state windows (a level here is exactly a load-probe level):

1. levels the load probe already measured on this server are known (not run again);
2. bracket: from ``start`` clients, double (from the largest level known to hold) until a level
   breaks the SLO, or the bound the KV pool allows (``capacity.kv_tokens`` / tokens per request,
   or ``max_concurrency``) holds it;
3. bisect between the largest level that holds and the smallest that breaks, until they are one
   client apart or within ``resolution`` of each other;

never more than ``max_levels`` levels measured here; 4. hold: the level the search found runs
once more on the same server for ``hold`` seconds (extended up to ``hold_max`` while an open
loop's growth is undecided: :data:`tuner.probes.load.Window`); one that does not hold counts as
broken and the search goes on a resolution below it (a short level right under a broken hold is no
evidence: its own short level had held too), at most ``holds`` times; after the last, no level runs
and there is no answer. Before it, the level above that
broke on its queue's growth or a latency percentile, no request failed, is held too where the
bracket is closed (or the answer's hold held): the answer
must hold each minute of its confirmation, and a 10-s window reads one stall of the engine as a
growing queue or a p99 over its target (on the H200, SGLang's own bench held 1.15 x an answer whose
level above had broken on its growth); a hold that holds makes it no break. Where the level budget
ran out with the bracket wide, holds bisect it (from the highest level whose hold held), keeping
one for the answer. A hold runs only where it ends before the trial's time limit (:mod:`tuner.base.clock`; its
window cut to what is left), a level only where its longest window does (else the search stops
there, and says so): a trial cut at its limit keeps nothing. The answer is the largest level
that held, and held its hold where one is asked for: ``concurrency``, its ``goodput`` (output tok/s
there, with its batch-means CI: the hold's where it ran) and its latencies; ``concurrency_violated``
is the smallest level that broke the SLO (the answer lies in between). Every level starts on a
drained server (:func:`tuner.probes._drain.drain`). Every level tried, with what it broke, its
window, its growth and its utilisation (its completions over the saturated completion rate
measured above it), is in the result's details (the trial's evidence).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx

from tuner.base import clock, progress
from tuner.base.level import Level
from tuner.base.metrics import SLO_AT_LEVEL, SLO_AT_RATE
from tuner.base.records import ProbeResult
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._senders import Senders
from tuner.probes.load import LoadProbe, Window, client_verdict
from tuner.space.schema import LoadProbeSpec, SloProbeSpec, SloTargets

__all__ = ["SloProbe", "past_fast_path", "search", "search_rate"]

logger = logging.getLogger(__name__)

OPEN_LOOP = (
    *SLO_AT_RATE, "rate", "client_bound", "client_late", "growth_ci", "growth_batches", "growth_from_s", "in_system_mean",
    "in_system_max", "send_lag_p50", "send_lag_max", "senders", "client_cores", "sender_failures",
)  # fmt: skip
LEVEL_EXTRA = ("horizon_s", "decisive", "drain_s", "drained", "drained_by", "ci_target_met")
UNBOUNDED = 1024  # where neither the KV pool nor the spec bounds the search
HOLD_TAIL_S = 20.0  # a hold's warm-up before its window opens and its close after, kept inside the trial's limit


class SloProbe(Probe):
    """See the module docstring; ``load``: the workload and windows of each level."""

    name = "slo"
    spec: SloProbeSpec

    def __init__(self, spec: SloProbeSpec, load: LoadProbeSpec | None = None) -> None:
        super().__init__(spec)
        self.load = LoadProbe(load or LoadProbeSpec())
        self._known: dict[int, dict[str, Any]] = {}

    @classmethod
    def metric_names(cls, spec: SloProbeSpec) -> set[str]:
        common = {"goodput", "goodput_ci", "levels", "bound", "held_s", *SLO_AT_LEVEL}
        if spec.mode == "rate":
            return {"rate", "rate_violated", "rate_client_bound", *common, *SLO_AT_RATE}
        return {"concurrency", "concurrency_violated", *common}

    def see(self, earlier: Sequence[ProbeResult]) -> None:
        """Levels the load probe measured on this server (same workload): known, not run again
        (closed loop only: a rate is not a concurrency)."""
        if self.spec.mode == "rate":
            return
        for result in earlier:
            if result.probe == "load":
                for level, summary in (result.details.get("levels") or {}).items():
                    self._known[int(level)] = summary

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    def hold_window(self) -> Window | None:
        """The hold level's window (None: no hold); an open loop's goes on while its growth is
        undecided (its interval spans :meth:`~tuner.space.schema.SloTargets.critical_growth`)."""
        spec = self.spec
        if not spec.hold:
            return None
        targets = spec.targets
        assert targets is not None

        def undecided(figures: dict[str, Any]) -> bool:
            critical, growth = targets.critical_growth(self.stamped(figures)), figures.get("growth")
            if critical is None or growth is None:
                return False
            ci = float(figures.get("growth_ci") or 0.0)
            return bool(float(growth) - ci <= critical < float(growth) + ci)

        most = max(spec.hold, spec.hold_max or spec.hold)
        return Window(spec.hold, most, more=undecided if spec.mode == "rate" else None, ci=False)

    def stamped(self, summary: dict[str, Any], *, decisive: bool = False) -> dict[str, Any]:
        """A level's figures with what its verdict needs beside them: the horizon an answer must
        hold for, the request timeout, and whether it makes an answer (a hold)."""
        return {
            **summary,
            "horizon_s": self.spec.horizon,
            "request_timeout": self.load.spec.request_timeout,
            "decisive": decisive,
        }

    async def _run(self, server: ServerHandle) -> ProbeResult:
        spec, targets = self.spec, self.spec.targets
        if targets is None:
            raise ValueError("probes.slo has no targets: the space was not loaded with its objective set")
        if spec.mode == "rate":
            return await self._run_rate(server, targets)
        bound, why = self._bound(server)
        top = min(bound, UNBOUNDED)
        limits = httpx.Limits(max_connections=top + 4, max_keepalive_connections=top + 4)
        timeout = httpx.Timeout(self.load.spec.request_timeout, connect=10.0)
        measured: dict[int, dict[str, Any]] = {}
        window = self.hold_window()
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
            prompts = await self.load.prompts(client, server)

            async def measure(level: int) -> dict[str, Any] | None:
                settled = await self.load.settle(client, server)
                if not self._level_fits():
                    return None
                progress.report(f"slo: {level} concurrent clients ({len(measured) + 1}/{spec.max_levels} levels)")
                measured[level] = self.stamped({**await self.load.level(client, server, prompts, level), **settled})
                return measured[level]

            async def hold(level: float) -> dict[str, Any] | None:
                assert window is not None
                settled = await self.load.settle(client, server)
                if (fitted := _fitted(window)) is None:
                    return None
                progress.report(f"slo: holding {level:.0f} concurrent clients for {fitted.least:g}s")
                summary = await self.load.level(client, server, prompts, int(level), window=fitted, slice_s=fitted.least / 3)
                return self.stamped({**summary, **settled}, decisive=True)

            outcome = await search(measure, targets, spec, top, dict(self._known), why, hold=hold if window else None)
        return self._result(outcome, measured, bound, why)

    async def _run_rate(self, server: ServerHandle, targets: SloTargets) -> ProbeResult:
        spec = self.spec
        timeout = httpx.Timeout(self.load.spec.request_timeout, connect=10.0)
        measured: dict[float, dict[str, Any]] = {}
        window = self.hold_window()
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            prompts = await self.load.prompts(client, server)
            with Senders() as senders:

                async def measure(rate: float) -> dict[str, Any] | None:
                    settled = await self.load.settle(client, server)
                    if not self._level_fits():
                        return None
                    progress.report(f"slo: {rate:.3g} requests/s ({len(measured) + 1}/{spec.max_levels} levels)")
                    summary = await self.load.rate_level(senders, server, prompts, rate, seed=len(measured))
                    measured[rate] = self.stamped({**summary, **settled})
                    return measured[rate]

                async def hold(rate: float) -> dict[str, Any] | None:
                    assert window is not None
                    settled = await self.load.settle(client, server)
                    if (fitted := _fitted(window)) is None:
                        return None
                    progress.report(f"slo: holding {rate:.3g} requests/s for {fitted.least:g}-{fitted.most:g}s")
                    summary = await self.load.rate_level(
                        senders, server, prompts, rate, seed=100 + len(measured), window=fitted, slice_s=fitted.least / 3
                    )
                    return self.stamped({**summary, **settled}, decisive=True)

                outcome = await search_rate(measure, targets, spec, hold=hold if window else None)
        outcome.stop_reason += past_fast_path(outcome, server.fast_path)
        levels = _details(outcome, set(measured))
        details = {"levels": levels, "holds": _holds(outcome), "stop_reason": outcome.stop_reason, "mode": "rate"}
        logger.info("slo: %.3g requests/s hold the SLO (%s)", outcome.answer, outcome.stop_reason)
        return ProbeResult(self.name, _metrics(outcome, "rate", len(measured), spec.max_rate or 0.0), details)

    def _level_fits(self) -> bool:
        """Whether a level's longest window (``probes.load.max_duration``) ends :data:`HOLD_TAIL_S`
        before the trial's time limit (:mod:`tuner.base.clock`); where not, the search stops with
        what it measured (a trial cut at its limit keeps nothing)."""
        room = _room()
        return room is None or room >= self.load.spec.max_duration

    def _bound(self, server: ServerHandle) -> tuple[int, str]:
        """The most clients worth trying: what the KV pool holds at the workload's tokens per
        request, and the spec's cap; the smaller wins."""
        per_request = self.load.spec.prompt_tokens + self.load.spec.output_tokens
        found = []
        if server.capacity.kv_tokens:
            found.append((max(1, server.capacity.kv_tokens // per_request), f"KV pool {server.capacity.kv_tokens:,} tokens"))
        if self.spec.max_concurrency:
            found.append((self.spec.max_concurrency, "probes.slo.max_concurrency"))
        if not found:
            return UNBOUNDED, "no KV pool reported and no max_concurrency"
        return min(found)

    def _result(self, outcome: Search, measured: dict[int, dict[str, Any]], bound: int, why: str) -> ProbeResult:
        metrics = _metrics(outcome, "concurrency", len(measured), bound)
        levels = {str(int(float(k))): v for k, v in _details(outcome, set(measured)).items()}
        details = {
            "levels": levels,
            "holds": _holds(outcome),
            "stop_reason": outcome.stop_reason,
            "bound": bound,
            "bound_from": why,
        }
        logger.info("slo: %.0f clients hold the SLO (%s)", outcome.answer, outcome.stop_reason)
        return ProbeResult(self.name, metrics, details)


def _room() -> float | None:
    """Seconds a level or a hold may measure: the trial's time left (:mod:`tuner.base.clock`) less
    :data:`HOLD_TAIL_S` for its warm-up and close; None where no limit is bound."""
    left = clock.left()
    return None if left is None else left - HOLD_TAIL_S


def _fitted(window: Window) -> Window | None:
    """A hold's window as the trial's time limit leaves it (:mod:`tuner.base.clock`): its ``most``
    cut to what ends :data:`HOLD_TAIL_S` before the limit; None where not even its ``least`` fits
    (the hold is not run: a trial cut at its limit keeps nothing it measured)."""
    if (room := _room()) is None:
        return window
    if room < window.least:
        return None
    return dataclasses.replace(window, most=min(window.most, room))


def _metrics(outcome: Search, answer: str, levels_run: int, bound: float) -> dict[str, float]:
    """The answer (``concurrency`` or ``rate``, and the smallest level that broke the SLO), the
    goodput and latencies at the answer (its hold's figures where it held one), the levels this
    probe ran, the bound it searched to and how long the answer held (``held_s``)."""
    best = outcome.figures(outcome.answer) if outcome.answer else None
    metrics: dict[str, float] = {
        answer: float(outcome.answer),
        "goodput": float(best["output_tok_s"]) if best else 0.0,
        "levels": float(levels_run),
        "bound": float(bound),
    }
    if best is not None:
        if best.get("output_tok_s_ci") is not None:
            metrics["goodput_ci"] = float(best["output_tok_s_ci"])
        metrics.update({m: float(best[m]) for m in SLO_AT_LEVEL if best.get(m) is not None})
        if answer == "rate":
            metrics.update({m: float(best[m]) for m in SLO_AT_RATE if best.get(m) is not None})
        if best.get("window_s") is not None and outcome.answer in outcome.holds:
            metrics["held_s"] = float(best["window_s"])
    if outcome.broke is not None:
        metrics[f"{answer}_violated"] = float(outcome.broke)
    if outcome.client_bound:
        metrics[f"{answer}_client_bound"] = float(min(outcome.client_bound))
    return metrics


def completions(summary: Mapping[str, Any]) -> float | None:
    """Requests a level completed per second: the open loop's completion rate, the closed loop's req/s."""
    done = summary.get("completion_rate", summary.get("req_s"))
    return None if done is None else float(done)


def _behind(summary: Mapping[str, Any], share: float) -> float | None:
    """An open-loop window's completions per second where they fell more than ``share`` behind
    its arrivals (its achieved rate); None where they kept up or it has no such figures."""
    done, sent = completions(summary), summary.get("achieved_rate")
    return done if done is not None and sent is not None and done < (1 - share) * float(sent) else None


def utilisation(levels: Mapping[float, Mapping[str, Any]], broken: Mapping[float, list[str]]) -> dict[float, float | None]:
    """Each level's completions over the saturated completion rate: the most any level above it
    that broke the SLO completed (None: none above broke it, so no saturation was measured)."""
    found: dict[float, float | None] = {}
    for level, summary in levels.items():
        above = [c for lv, s in levels.items() if lv > level and broken.get(lv) and (c := completions(s)) is not None]
        done = completions(summary)
        found[level] = done / max(above) if above and done is not None and max(above) > 0 else None
    return found


def past_fast_path(outcome: Search, cap: int | None) -> str:
    """The stop reason's last clause where an open-loop level or hold had more requests in the
    system at once than its config decodes on CUDA graphs (``cap``, where more may run): which,
    and how many. Past it each step runs without graphs and a queue feeds itself; the server's log
    says so (SGLang's "cuda graph: False") and nobody reads it."""
    if not cap:
        return ""
    over = [
        (f"{lv:g}" + (" (hold)" if kind else ""), int(summary["in_system_max"]))
        for kind, found in enumerate((outcome.levels, outcome.holds))
        for lv, summary in sorted(found.items())
        if (summary.get("in_system_max") or 0) > cap
    ]
    if not over:
        return ""
    seen = ", ".join(f"{n} at {level}" for level, n in over)
    return f"; past the {cap} running requests this config decodes on CUDA graphs: {seen} in the system at once"


def _details(outcome: Search, here: set[float] | set[int]) -> dict[str, dict[str, Any]]:
    use = utilisation(outcome.levels, outcome.broken)
    return {
        f"{lv:g}": _level_details(summary, outcome.broken[lv], lv in here, use[lv])
        for lv, summary in sorted(outcome.levels.items())
    }


def _holds(outcome: Search) -> dict[str, dict[str, Any]]:
    """Each hold level: its figures and what it broke."""
    return {f"{lv:g}": _level_details(summary, outcome.hold_broken[lv], True) for lv, summary in sorted(outcome.holds.items())}


def _level_details(summary: Mapping[str, Any], broke: list[str], here: bool, utilisation: float | None = None) -> dict[str, Any]:
    """What a level measured and what it broke, as the trial keeps it (a :class:`Level`, stored)."""
    return Level.of(
        {
            "held": not broke,
            "broke": broke,
            "measured_here": here,
            "output_tok_s": summary.get("output_tok_s"),
            "output_tok_s_ci": summary.get("output_tok_s_ci"),
            "window_s": summary.get("window_s"),
            "requests": summary.get("requests"),
            "first_error": summary.get("first_error"),
            **{m: summary.get(m) for m in SLO_AT_LEVEL},
            "waiting": summary.get("waiting"),  # still waiting for a first token when the window closed
            "ttft_p99_censored": summary.get("ttft_p99_censored"),
            **{m: summary.get(m) for m in OPEN_LOOP if m in summary},
            **{m: summary.get(m) for m in LEVEL_EXTRA if m in summary},
            "utilisation": utilisation,
        }
    ).to_dict()


class Search:
    """What the search found: every level it knows (``levels``), what each broke, the largest
    level that held (``held``, 0: none) and the smallest that broke (``broke``). An open-loop
    level whose verdict is the client's (:func:`~tuner.probes.load.client_verdict`: its senders
    fell short of the schedule, or ran late where it broke) is neither, and the search goes no
    higher. ``holds``: the hold levels run (a level whose hold broke counts as broken);
    ``answer``: ``held`` where no hold is asked for, else the largest level whose hold held (under
    the ceiling; a level above it that only a short window read as held is no answer).
    ``reach``: where the answer's hold broke at a level, the search stays a resolution below it
    (levels under ``reach``; ``reach_from``: that level): near it a short level held where its hold
    then broke (SGLang on a slower host: 48 and 52 requests/s held 10 s and broke over a minute),
    so the next hold goes a full step down instead of to the level the short window found next;
    where that hold's server fell behind its arrivals, a resolution below what it completed
    (``reach_served``, :meth:`served`), if that is lower."""

    def __init__(self, targets: SloTargets, known: Mapping[float, dict[str, Any]]) -> None:
        self.targets = targets
        self.levels: dict[float, dict[str, Any]] = {}  # clients (closed loop) or requests/s (open loop)
        self.broken: dict[float, list[str]] = {}
        self.client_bound: dict[float, str] = {}
        self.holds: dict[float, dict[str, Any]] = {}
        self.hold_broken: dict[float, list[str]] = {}
        self.hold_asked = False
        self.notes: list[str] = []  # what each hold found, for the stop reason
        self.stop_reason = ""
        self.reach: float | None = None
        self.reach_from: float | None = None
        self.reach_served: float | None = None  # where what reach_from's hold completed set reach (Search.served)
        self.late: float | None = None  # the level the trial's time limit left no room for
        for level, summary in known.items():
            self.add(level, summary)

    def add(self, level: float, summary: dict[str, Any]) -> None:
        self.levels[level] = summary
        self.broken[level] = self.targets.violated(summary)
        if (why := client_verdict(summary, self.broken[level], self.targets)) is not None:
            self.client_bound[level] = why

    def add_hold(self, level: float, summary: dict[str, Any]) -> bool:
        """A hold at ``level``: True where it held; where not, the level counts as broken (or
        client-bound, where the client is why)."""
        broke = self.targets.violated(summary)
        self.holds[level], self.hold_broken[level] = summary, broke
        if (why := client_verdict(summary, broke, self.targets)) is not None:
            self.client_bound[level] = f"hold: {why}"
            self.hold_broken[level] = [*broke, why]
            return False
        self.broken[level] = [f"held {summary.get('window_s') or 0:.0f}s: {b}" for b in broke]
        return not broke

    def short_break(self, level: float) -> bool:
        """Whether ``level`` broke only on what a short window may read from one stall of the
        engine: its queue's growth or a latency percentile, every latency measured, no request
        failed, and its senders on schedule. Near the answer such a level is judged again over a
        hold's window (:func:`_held`), the window the confirmation judges each minute on."""
        summary = self.levels.get(level)
        if summary is None or not self.broken.get(level) or level in self.client_bound:
            return False
        return (
            all(summary.get(n) is not None for n in self.targets.latencies)
            and (summary.get("error_rate") or 0.0) <= self.targets.error_rate
        )

    def saturated(self, level: float, share: float) -> bool:
        """Whether ``level``'s completions fell more than ``share`` behind its arrivals (an open
        loop's completion rate under (1 - share) x its achieved rate): its server was saturated
        through the window, not stalled in it, and a hold would read the same break over a minute
        (SGLang: the holds of 88, 56, 64 and 72 requests/s, such levels on four hosts, all broke)."""
        return _behind(self.levels.get(level) or {}, share) is not None

    def served(self, level: float, share: float) -> float | None:
        """What ``level``'s hold completed per second where its completions fell more than
        ``share`` behind its arrivals (None: they kept up, or no hold ran there): the server's
        rate under that load, its slow state's where it tipped into one. No load above it can hold
        for long: past a tip the server must drain at that rate to recover (SGLang on an H100:
        holds at 60, 56 and 48 requests/s completed 47.6, 48.3 and 43.0 per second)."""
        return _behind(self.holds.get(level) or {}, share)

    def figures(self, level: float) -> dict[str, Any]:
        """A level's figures: its hold's where it held one, else its search level's."""
        return self.holds.get(level) or self.levels[level]

    @property
    def answer(self) -> float:
        if not self.hold_asked:
            return self.held
        ceiling = self.ceiling if self.ceiling is not None else float("inf")
        return max((lv for lv in self.confirmed if lv < ceiling), default=0)

    @property
    def confirmed(self) -> list[float]:
        """The levels whose hold held."""
        return [lv for lv, broke in self.hold_broken.items() if not broke]

    @property
    def held(self) -> float:
        """The largest level that held, below every level that broke or could not be sent (a level
        that held above one that broke is noise around the answer: the lower break wins)."""
        ceiling = self.ceiling if self.ceiling is not None else float("inf")
        return max((lv for lv, b in self.broken.items() if not b and lv < ceiling), default=0)  # client-bound: >= ceiling

    @property
    def broke(self) -> float | None:
        return min((lv for lv, b in self.broken.items() if b and lv not in self.client_bound), default=None)

    @property
    def ceiling(self) -> float | None:
        """The lowest level that broke the SLO or could not be sent, or the ``reach`` a broken
        hold left: the search stays below it."""
        tops = [lv for lv in (self.broke, min(self.client_bound, default=None), self.reach) if lv is not None]
        return min(tops) if tops else None


Hold = Callable[[float], Awaitable[dict[str, Any] | None]]  # None: no time left for it before the trial's limit


@dataclasses.dataclass(frozen=True)
class _Step:
    """How a search moves in its unit: ``below(level)``, a resolution under a level whose hold
    broke; ``bracketed(low, high)``, whether the bracket is within the resolution; ``middle(low,
    high)``, the level that bisects it; ``spent()``, whether the level budget is."""

    unit: str
    resolution: float
    below: Callable[[float], float]
    bracketed: Callable[[float, float], bool]
    middle: Callable[[float, float], float]
    spent: Callable[[], bool]


async def _tried(found: Search, hold: Hold, level: float) -> bool | None:
    """Hold ``level`` (:meth:`Search.add_hold`); None where the trial has no time left for it."""
    summary = await hold(level)
    if summary is None:
        found.notes.append(f"; no time was left for a hold at {level:g} before the trial's limit")
        return None
    return found.add_hold(level, summary)


async def _held(found: Search, hold: Hold | None, most: int, step: _Step) -> bool:
    """Hold the level the search found (True: the answer stands: it held, there is none, no hold
    is asked for, or the hold budget or the trial's time is spent; False: the search goes on).

    1. The level above it, where it broke on its growth or a latency percentile alone
       (:meth:`Search.short_break`) and its server kept up with its arrivals
       (:meth:`Search.saturated`), is held first where the bracket is closed or the answer's own
       hold held: one that holds is no break, and the search goes on above it.
    2. Where the level budget is spent and the bracket is still wide, a hold bisects it: it runs
       at the middle between the highest level whose hold held (else the search's answer) and the
       ceiling, keeping a hold for the answer itself where none has held yet.
    3. Else the answer is held. Where a hold breaks, the search goes on below ``step.below(level)``,
       a resolution under it (:attr:`Search.reach`).

    What each hold found is added to the stop reason."""
    unit = step.unit
    if hold is None or not found.held:
        return _stop(found)
    top = found.broke
    near = top is not None and (found.held in found.holds or step.bracketed(found.held, top))
    if (
        near
        and top is not None
        and top not in found.holds
        and found.short_break(top)
        and not found.saturated(top, step.resolution)
        and len(found.holds) < most
    ):
        short = f"{top:g} {unit} broke in {found.levels[top].get('window_s') or 0:.0f}s ({'; '.join(found.broken[top])})"
        if (held := await _tried(found, hold, top)) is None:
            return _stop(found)
        if held:  # the search goes on above it
            found.notes.append(f"; {short}, then held {found.holds[top].get('window_s') or 0:.0f}s on the same server")
            return False
        found.notes.append(f"; {short} and did not hold {found.holds[top].get('window_s') or 0:.0f}s either")
        # what its server completed put the ceiling under the answer: levels go on below it
        if _below(found, top, step, own=False):
            return False
    left = most - len(found.holds)
    confirmed = found.confirmed
    low, high = max(confirmed, default=found.held), found.ceiling
    if step.spent() and high is not None and not step.bracketed(low, high) and left >= (1 if confirmed else 2):
        level = step.middle(low, high)
        what = f"; the level budget spent, the bracket {low:g}-{high:g} {unit} bisected by a hold: {level:g}"
        if (held := await _tried(found, hold, level)) is None:
            return _stop(found)
        if held:
            found.notes.append(f"{what} held {found.holds[level].get('window_s') or 0:.0f}s")
        else:
            broke = "; ".join(found.hold_broken[level])
            found.notes.append(f"{what} did not hold {found.holds[level].get('window_s') or 0:.0f}s ({broke})")
            _below(found, level, step)
        return False
    if found.held in found.holds:
        return _stop(found)
    if left <= 0:
        return _stop(found, _spent(found, most, unit))
    level = found.held
    if (held := await _tried(found, hold, level)) is None:
        return _stop(found)
    if held:
        found.notes.append(f"; held {found.holds[level].get('window_s') or 0:.0f}s on the same server")
        return _stop(found)
    found.notes.append(
        f"; {level:g} {unit} did not hold {found.holds[level].get('window_s') or 0:.0f}s ({'; '.join(found.hold_broken[level])})"
    )
    if left <= 1:  # no hold left for a level below: stop here
        return _stop(found, _spent(found, most, unit))
    _below(found, level, step)
    return False


def _stop(found: Search, end: str = "") -> bool:
    """The search ends: what the holds found goes on its stop reason. Where holds ran and none held,
    the reason says so first: its opening is the short levels' reading ("bracketed: 48 requests/s
    hold the SLO"), written before the holds broke it."""
    found.stop_reason += "".join(found.notes) + end
    if found.holds and not found.answer:
        found.stop_reason = f"no answer, no hold held (the short levels read first): {found.stop_reason}"
    return True


def _below(found: Search, level: float, step: _Step, *, own: bool = True) -> bool:
    """A hold at ``level`` broke: the search stays a resolution below it (not where the client was
    why, nor where a hold held in that resolution: a minute that held is no short level's reading,
    and the broken hold itself then bounds the bracket). Where the hold's server fell behind its
    arrivals, it stays a resolution below what the server completed there (:meth:`Search.served`):
    the twelfth session's tune held 56 and 48 after 60 had completed 47.6/s, and both broke.
    ``own`` False: the level above the answer, whose short break its hold confirmed, bounds the
    search already; only what it completed may bound it lower. True where it lowered the search's reach."""
    if level in found.client_bound:
        return False
    reach = step.below(level) if own else math.inf
    served = found.served(level, step.resolution)
    if served is not None and step.below(served) < reach:
        reach = step.below(served)
    else:
        served = None
    if reach == math.inf or any(reach <= lv < level for lv in found.confirmed):
        return False
    if found.reach is not None and reach >= found.reach:
        return False
    found.reach, found.reach_from, found.reach_served = reach, level, served
    return True


async def _measured(found: Search, measure: Callable[[Any], Awaitable[dict[str, Any] | None]], level: float) -> bool:
    """Measure ``level`` and add it (:meth:`Search.add`); False where the trial's limit left no
    room for it (:attr:`Search.late`: the levels end there)."""
    if (summary := await measure(level)) is None:
        found.late = level
        return False
    found.add(level, summary)
    return True


def _levels_spent(found: Search, spec: SloProbeSpec) -> str:
    """Why the levels ended before the bracket closed: the trial's time limit, or the level budget."""
    if found.late is not None:
        return f"no time was left for a level at {found.late:g} before the trial's limit"
    return f"level budget spent ({spec.max_levels} levels)"


def _spent(found: Search, most: int, unit: str) -> str:
    """The stop reason's end once the holds are spent: the answer where a level below the broken
    holds held its own (its :attr:`Search.answer`), else none."""
    if found.answer:
        return f"; {most} hold(s) spent: {found.answer:g} {unit}, whose hold held, is the answer"
    return f"; {most} hold(s) spent, none held: no answer"


async def search(
    measure: Callable[[int], Awaitable[dict[str, Any] | None]],
    targets: SloTargets,
    spec: SloProbeSpec,
    bound: int,
    known: dict[int, dict[str, Any]],
    bound_from: str = "",
    *,
    hold: Hold | None = None,
) -> Search:
    """Bracket, then bisect (see the module docstring); ``measure(level)`` runs one level,
    ``hold(level)`` the answer's hold level."""
    found = Search(targets, {lv: s for lv, s in known.items() if lv <= bound})
    found.hold_asked = hold is not None
    runs = 0

    async def run(level: int) -> None:
        nonlocal runs
        if await _measured(found, measure, level):
            runs += 1

    def resolved(low: float) -> int:
        return max(1, int(spec.resolution * low))

    step = _Step(
        "clients",
        spec.resolution,
        below=lambda lv: lv - resolved(lv) + 1,
        bracketed=lambda low, high: high - low <= resolved(low),
        middle=lambda low, high: int((low + high) // 2),
        spent=lambda: runs >= spec.max_levels or found.late is not None,
    )
    while True:
        await _closed_search(found, run, step, spec, bound, bound_from)
        if await _held(found, hold, spec.holds, step):
            return found


async def _closed_search(
    found: Search, run: Callable[[int], Awaitable[None]], step: _Step, spec: SloProbeSpec, bound: int, bound_from: str
) -> None:
    spent = step.spent
    level = int(min(max(spec.start, found.held), bound))
    while found.broke is None:  # bracket: double until a level breaks the SLO or the bound holds it
        if level in found.levels:
            if level >= bound:
                found.stop_reason = f"the bound ({bound} clients, {bound_from}) holds the SLO"
                return
            level = min(level * 2, bound)
            continue
        if spent():
            break
        await run(level)
    while found.broke is not None:  # bisect between the largest level that holds and the smallest that breaks
        low, high = found.held, min(found.broke, found.reach if found.reach is not None else found.broke)
        if high == 1:
            found.stop_reason = "even 1 client breaks the SLO"
            return
        if step.bracketed(low, high):
            found.stop_reason = f"bracketed: {low:.0f} clients hold the SLO, {_above(found, high, '.0f')}"
            return
        if spent():
            break
        await run(int(step.middle(low, high)))
    found.stop_reason = f"{_levels_spent(found, spec)}: {found.held:.0f} clients hold the SLO" + (
        f", {found.broke:.0f} break it" if found.broke is not None else ""
    )


async def search_rate(
    measure: Callable[[float], Awaitable[dict[str, Any] | None]],
    targets: SloTargets,
    spec: SloProbeSpec,
    *,
    hold: Hold | None = None,
) -> Search:
    """The open-loop answer: double the request rate from ``start_rate`` until a rate breaks the
    SLO (or ``max_rate`` holds it), then bisect until the bracket is within ``resolution``
    (default 10 %) of the rate that holds; then ``hold`` it. A rate the senders could not deliver
    (client-bound) ends the doubling like a break, but is never the answer nor its ``rate_violated``."""
    found = Search(targets, {})
    found.hold_asked = hold is not None
    runs = 0

    async def run(rate: float) -> None:
        nonlocal runs
        if await _measured(found, measure, rate):
            runs += 1

    resolution = spec.resolution or 0.1
    step = _Step(
        "requests/s",
        resolution,
        below=lambda lv: lv * (1 - resolution),
        bracketed=lambda low, high: bool(low) and high - low <= resolution * low,
        middle=lambda low, high: (low + high) / 2,
        spent=lambda: runs >= spec.max_levels or found.late is not None,
    )
    while True:
        await _rate_search(found, run, step, spec)
        if await _held(found, hold, spec.holds, step):
            return found


async def _rate_search(found: Search, run: Callable[[float], Awaitable[None]], step: _Step, spec: SloProbeSpec) -> None:
    spent = step.spent
    rate = max(spec.start_rate, found.held * 2) if found.held else spec.start_rate
    while found.ceiling is None:
        if spent():
            break
        await run(rate)
        if found.ceiling is None:
            if spec.max_rate is not None and rate >= spec.max_rate:
                found.stop_reason = f"max_rate ({spec.max_rate:g} requests/s) holds the SLO"
                return
            rate = min(rate * 2, spec.max_rate) if spec.max_rate is not None else rate * 2
    while (high := found.ceiling) is not None:
        low = found.held
        if not low and high <= spec.start_rate / 8:
            found.stop_reason = f"even {high:.3g} requests/s " + (
                "could not be sent (client-bound)" if high in found.client_bound else "break the SLO"
            )
            return
        if step.bracketed(low, high):
            found.stop_reason = f"bracketed: {low:.3g} requests/s hold the SLO, {_above(found, high)}"
            return
        if spent():
            break
        await run(step.middle(low, high))
    found.stop_reason = f"{_levels_spent(found, spec)}: {found.held:.3g} requests/s hold the SLO" + (
        f", {_above(found, found.ceiling)}" if found.ceiling is not None else ""
    )


def _above(found: Search, high: float, form: str = ".3g") -> str:
    """What stopped the search at ``high``: the server (a break), the client (a shortfall), or a
    hold that broke a resolution above (:attr:`Search.reach`)."""
    if high in found.client_bound:
        return f"{high:{form}} could not be sent ({found.client_bound[high]}): the server's own limit may lie higher"
    if high == found.reach and not found.broken.get(high):
        if found.reach_served is not None:
            return (
                f"the search stays under {high:{form}}, a resolution below the {found.reach_served:.3g} requests/s "
                f"that {found.reach_from:g}'s hold completed"
            )
        return f"the search stays under {high:{form}}, a resolution below {found.reach_from:g}, whose hold broke"
    return f"{high:{form}} break it"
