"""Confirmation probe: one long level at a config's SLO answer, and whether the SLO held throughout.

The search measures each config in short windows (seconds to a minute a level): enough to rank
configs, not to promise a fleet that the answer holds for an hour. This probe runs the answer
once, long (default 10 minutes, MLPerf LoadGen's minimum run length), with the search's own
workload: ``concurrency`` clients in a closed loop, or Poisson arrivals at ``rate`` per second
from the open loop's senders. It reports the goodput over the whole run with its batch-means CI,
the p99s of every slice (a minute by default) against the SLO, and the drift of goodput across
the run; the SLO held throughout only if the whole run and every slice hold it (and, open loop,
the senders delivered every slice's schedule: a client-bound run confirms nothing; sends that ran
late are in the TTFTs, which count from the schedule, so they can only make a hold harder).

A run that does not hold ends at the first slice that breaks the SLO (nothing after it can make it
hold), and the load steps down by ``step`` (10 %) after the server has drained, each step a run of
the same length, until one holds (the confirmed answer), at most ``steps`` times and within
``budget``; where ``until`` is set (a command with a timeout), a run that cannot end before it
is not started, the first included, reckoned once the server is up: a confirmation that ran none
says why (``not_started``) instead of a verdict. The result keeps every run: the first (the
search's answer) and the confirmed one.
Each run, as it ends, is also appended to ``confirm-runs.jsonl`` in the trial's folder
(:data:`RUNS_FILE`), so a confirmation cut short (a deadline, a stop) keeps the runs it finished;
the run in progress keeps its figures so far in ``confirm-partial.json`` (:data:`PARTIAL_FILE`,
rewritten every few seconds), so one cut minutes in still says how long it held and how.
"""

from __future__ import annotations

import asyncio
import json
import logging
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from tuner.base import progress
from tuner.base.level import Level
from tuner.base.records import ProbeResult
from tuner.base.units import format_duration
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._senders import Senders
from tuner.probes.load import LoadProbe, Window, client_verdict, request_body
from tuner.space.schema import ConfirmProbeSpec

__all__ = [
    "PARTIAL_FILE",
    "RUNS_FILE",
    "ConfirmProbe",
    "drift",
    "kept_run",
    "loads",
    "no_time",
    "run_so_far",
    "run_verdict",
    "step_below",
    "verdict",
]

logger = logging.getLogger(__name__)

RUNS_FILE = "confirm-runs.jsonl"  # in the trial's folder: one line per finished run, as the result keeps it
PARTIAL_FILE = "confirm-partial.json"  # in the trial's folder: the run in progress, its figures so far
AT_RUN = ("ttft_p99", "itl_p99", "tpot_p99", "error_rate", "req_s")
AFTER_RUN_S = 15.0  # from a run's start to its end beyond its length: the drain before it, its last requests, the result


class ConfirmProbe(Probe):
    """See the module docstring."""

    name = "confirm"
    spec: ConfirmProbeSpec

    @classmethod
    def metric_names(cls, spec: ConfirmProbeSpec) -> set[str]:
        extra = {"achieved_over_offered"} if spec.rate is not None else set()
        return {"goodput", "goodput_ci", "held", "confirmed", "steps", "drift", "slices", "slices_broken", *AT_RUN, *extra}

    def run(self, server: ServerHandle) -> ProbeResult:
        return asyncio.run(self._run(server))

    async def _run(self, server: ServerHandle) -> ProbeResult:
        spec = self.spec
        if spec.targets is None:
            raise ValueError("probes.confirm has no targets: the space was not loaded with its objective set")
        whole = {"duration": spec.duration, "max_duration": spec.duration, "ci_target": 1e-9}  # no CI target ends it early
        load = spec.load.model_copy(update={**whole, "concurrency": [1], "target": None})
        probe = LoadProbe(load)
        top = (spec.concurrency or 0) + 4
        limits = httpx.Limits(max_connections=top, max_keepalive_connections=top)
        timeout = httpx.Timeout(load.request_timeout, connect=10.0)
        began = time.monotonic()
        runs: list[dict[str, Any]] = []
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
            prompts = await probe.prompts(client, server)
            with Senders() as senders:
                for at in loads(spec):
                    if runs and spec.budget is not None and time.monotonic() - began + spec.duration > spec.budget:
                        logger.info("confirm: no time left in the budget (%.0fs) for a run at %g", spec.budget, at)
                        break
                    if (short := no_time(spec, at)) is not None:
                        logger.info("confirm: %s", short)
                        if not runs:
                            return ProbeResult(self.name, {}, {"runs": [], "not_started": short})
                        break
                    progress.report(
                        f"confirm: {_label(spec, at)} for {spec.duration:g}s" + (f" (step {len(runs)})" if runs else "")
                    )
                    settled = await probe.settle(client, server)
                    window = Window(spec.duration, spec.duration, enough=self._looked_at(server, at))
                    if spec.rate is not None:
                        summary = await probe.rate_level(
                            senders, server, prompts, at, seed=1000 + len(runs), slice_s=spec.slice, window=window
                        )
                    else:
                        summary = await probe.level(client, server, prompts, int(at), slice_s=spec.slice, window=window)
                    runs.append(run_verdict(spec, at, {**summary, **settled}))
                    if server.keep is not None:
                        with (server.keep / RUNS_FILE).open("a") as out:
                            out.write(json.dumps(kept_run(runs[-1]), default=str) + "\n")
                        (server.keep / PARTIAL_FILE).unlink(missing_ok=True)
                    if runs[-1]["held"]:
                        break
        return verdict(spec, runs)

    def _looked_at(self, server: ServerHandle, at: float) -> Callable[[dict[str, Any]], bool]:
        """The window's ``enough``: keeps the run's figures so far in the trial's folder (what a
        cut leaves of it), and ends the run once it cannot hold."""
        spec = self.spec

        def enough(figures: dict[str, Any]) -> bool:
            if server.keep is not None:
                kept = server.keep / PARTIAL_FILE
                kept.with_suffix(".tmp").write_text(json.dumps(run_so_far(spec, at, figures), default=str))
                kept.with_suffix(".tmp").replace(kept)
            return self._broken_already(figures)

        return enough

    def _broken_already(self, figures: dict[str, Any]) -> bool:
        """A run whose figures so far (a slice at least) break a latency or error target cannot hold
        throughout: the p99 over a union of slices is at most the worst slice's, so some slice broke."""
        targets = self.spec.targets
        assert targets is not None
        if (figures.get("window_s") or 0.0) < self.spec.slice:
            return False
        latency = {k: v for k, v in figures.items() if k not in ("growth", "slices")}
        broke = targets.violated(latency)
        return bool(broke) and client_verdict(latency, broke, targets) is None


def loads(spec: ConfirmProbeSpec) -> list[float]:
    """The answer, then each step down: ``step`` less each time (a closed loop at least one client
    less, never under one), at most ``steps`` of them."""
    at: float | None = float(spec.concurrency) if spec.concurrency is not None else float(spec.rate or 0.0)
    found: list[float] = []
    while at is not None and len(found) <= spec.steps:
        found.append(at)
        at = step_below(at, spec.step, closed=spec.concurrency is not None)
    return found


def step_below(at: float, step: float, *, closed: bool) -> float | None:
    """The load one step below ``at``: ``step`` less (a closed loop at least one client less; None
    under one client)."""
    if not closed:
        return at * (1 - step)
    below = float(min(int(at * (1 - step)), int(at) - 1))
    return below if below >= 1 else None


def no_time(spec: ConfirmProbeSpec, at: float, now: float | None = None) -> str | None:
    """Why a run at ``at`` cannot end before ``spec.until`` (None: it can, or no ``until``)."""
    if spec.until is None:
        return None
    left, need = spec.until - (time.time() if now is None else now), spec.duration + AFTER_RUN_S
    if left >= need:
        return None
    return (
        f"no time for {format_duration(spec.duration)} at {_label(spec, at)}: {max(0.0, left):.0f} s left before the "
        f"command's timeout, {need:.0f} s needed"
    )


def _label(spec: ConfirmProbeSpec, at: float) -> str:
    return f"{at:.0f} clients" if spec.concurrency is not None else f"{at:.3g} requests/s"


def judged(spec: ConfirmProbeSpec, figures: Mapping[str, Any]) -> list[str]:
    """What of the SLO a run's (or a slice's) figures break, and, where the senders may be why,
    the client's verdict after it (:func:`~tuner.probes.load.client_verdict`)."""
    assert spec.targets is not None
    broke = spec.targets.violated(figures)
    if (why := client_verdict(figures, broke, spec.targets)) is not None:
        broke.append(why)
    return broke


def run_verdict(spec: ConfirmProbeSpec, at: float, summary: dict[str, Any]) -> dict[str, Any]:
    """One run's figures against the SLO: the whole window (with its growth judged over the run's
    own length), then each slice; held only where all of them hold."""
    assert spec.targets is not None
    whole = {**summary, "horizon_s": spec.duration, "decisive": True, "request_timeout": spec.load.request_timeout}
    broke = judged(spec, whole)
    slices = []
    for i, part in enumerate(summary.get("slices") or []):
        its = judged(spec, part)
        start = part["window_at"][0] - summary["window_at"][0]
        figures = {**{k: v for k, v in part.items() if k != "window_at"}, "index": i, "from_s": start, "broke": its}
        slices.append(Level.of(figures).to_dict())
    rates = [s["output_tok_s"] for s in slices if s.get("output_tok_s") is not None]
    ended_early = (summary.get("window_s") or 0.0) < spec.duration * 0.99
    held = not broke and all(not s["broke"] for s in slices) and not ended_early
    return {
        "at": at,
        "held": held,
        "seconds": summary.get("window_s"),
        "ended_early": ended_early,
        "broke": broke,
        "slices": slices,
        "goodput": float(summary["output_tok_s"]),
        "goodput_ci": summary.get("output_tok_s_ci"),
        "drift": drift(rates) if len(rates) >= 2 else 0.0,
        "growth": summary.get("growth"),
        "growth_ci": summary.get("growth_ci"),
        "growth_critical": spec.targets.critical_growth(whole),
        "window": Level.of({k: v for k, v in summary.items() if k not in ("slices", "batch_rates")}).to_dict(),
        "body": request_body(
            spec.load.output_tokens, spec.load.request
        ),  # what its requests sent: a resumed confirmation goes on only with the same
    }


SO_FAR = ("ttft_p99", "itl_p99", "error_rate", "achieved_over_offered", "completion_rate", "growth", "growth_ci")
SLICE_SO_FAR = ("from_s", "output_tok_s", "ttft_p99", "itl_p99", "error_rate", "achieved_over_offered", "send_lag_p99")


def run_so_far(spec: ConfirmProbeSpec, at: float, figures: dict[str, Any]) -> dict[str, Any]:
    """A run in progress as a cut leaves it: how long it has measured of its length, its goodput
    and p99s over that time, and what of the SLO they break already (the growth is judged only
    at the end, over the whole run: not here); and its whole slices so far (``slices``), each
    judged as :func:`run_verdict` judges a finished run's."""
    assert spec.targets is not None
    broke = judged(spec, {k: v for k, v in figures.items() if k not in ("growth", "slices")})
    slices = [
        {**{k: part.get(k) for k in SLICE_SO_FAR if part.get(k) is not None}, "broke": judged(spec, part)}
        for part in figures.get("slices") or ()
    ]
    return {
        "at": at,
        "seconds": figures.get("window_s"),
        "of": spec.duration,
        "goodput": figures.get("output_tok_s"),
        "broke": broke,
        **{k: figures.get(k) for k in SO_FAR if figures.get(k) is not None},
        "slices": slices,
    }


def verdict(spec: ConfirmProbeSpec, runs: list[dict[str, Any]]) -> ProbeResult:
    """The runs as one result: ``held`` (the answer itself held throughout), ``confirmed`` (the
    load that held: the answer, a step below it, or 0 where none did), and the figures of the run
    that held (else of the first)."""
    key = "concurrency" if spec.concurrency else "rate"
    first = runs[0]
    kept = next((r for r in runs if r["held"]), None)
    shown = kept or first
    window = shown["window"]
    metrics: dict[str, float] = {
        "goodput": shown["goodput"],
        "held": float(first["held"]),
        "confirmed": float(kept["at"]) if kept else 0.0,
        "steps": float(len(runs) - 1),
        "drift": shown["drift"],
        "slices": float(len(shown["slices"])),
        "slices_broken": float(sum(1 for s in shown["slices"] if s["broke"])),
    }
    if shown.get("goodput_ci") is not None:
        metrics["goodput_ci"] = float(shown["goodput_ci"])
    metrics.update({m: float(window[m]) for m in AT_RUN if window.get(m) is not None})
    if spec.rate is not None and window.get("achieved_over_offered") is not None:
        metrics["achieved_over_offered"] = float(window["achieved_over_offered"])
    details = {
        key: first["at"],
        "seconds": first["seconds"],
        "broke": first["broke"],
        "slices": first["slices"],
        "window": first["window"],
        "runs": [kept_run(r) for r in runs],
        "confirmed": {key: kept["at"]} if kept else None,
    }
    logger.info(
        "confirm: %s %s for %.0fs%s", "held" if first["held"] else "broke", {key: first["at"]}, first["seconds"] or 0.0,
        f"; confirmed at {kept['at']:g} after {len(runs) - 1} step(s)" if kept and kept is not first else "",
    )  # fmt: skip
    return ProbeResult("confirm", metrics, details)


def kept_run(run: dict[str, Any]) -> dict[str, Any]:
    """A run as the result keeps it: its verdict, slices and growth, and of its window what says
    how it started (drained) and what it delivered."""
    window = run["window"]
    keep = (
        "drained", "drain_s", "drained_by",
        "achieved_over_offered", "completion_rate", "ttft_p99", "itl_p99", "tpot_p99", "error_rate",
    )  # fmt: skip
    return {**{k: v for k, v in run.items() if k != "window"}, **{k: window.get(k) for k in keep if k in window}}


def drift(rates: list[float]) -> float:
    """The least-squares trend of the slices' goodput over the run, as a share of the mean: the
    change from the first slice to the last that the trend line says (0: flat)."""
    mean = statistics.fmean(rates)
    if not mean:
        return 0.0
    slope = statistics.linear_regression(range(len(rates)), rates).slope
    return slope * (len(rates) - 1) / mean
