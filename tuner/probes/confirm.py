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
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from typing import Any

import httpx

from tuner import progress
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._senders import Senders
from tuner.probes.load import LoadProbe, client_verdict
from tuner.records import ProbeResult
from tuner.space.schema import ConfirmProbeSpec

__all__ = ["ConfirmProbe", "drift"]

logger = logging.getLogger(__name__)

AT_RUN = ("ttft_p99", "itl_p99", "tpot_p99", "error_rate", "req_s")


class ConfirmProbe(Probe):
    """See the module docstring."""

    name = "confirm"
    spec: ConfirmProbeSpec

    @classmethod
    def metric_names(cls, spec: ConfirmProbeSpec) -> set[str]:
        extra = {"achieved_over_offered"} if spec.rate is not None else set()
        return {"goodput", "goodput_ci", "held", "drift", "slices", "slices_broken", *AT_RUN, *extra}

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
        answer = f"{spec.concurrency} clients" if spec.concurrency else f"{spec.rate:g} requests/s"
        progress.report(f"confirm: {answer} for {spec.duration:g}s")
        async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
            prompts = await probe.prompts(client, server)
            if spec.rate is not None:
                with Senders() as senders:
                    summary = await probe.rate_level(senders, server, prompts, spec.rate, seed=1000, slice_s=spec.slice)
            else:
                assert spec.concurrency is not None
                summary = await probe.level(client, server, prompts, spec.concurrency, slice_s=spec.slice)
        return verdict(spec, summary)


def verdict(spec: ConfirmProbeSpec, summary: dict[str, Any]) -> ProbeResult:
    """The run's figures against the SLO: the whole window, then each slice."""
    assert spec.targets is not None
    broke = spec.targets.violated(summary)
    if (why := client_verdict(summary, broke)) is not None:
        broke.append(why)
    slices = []
    for i, part in enumerate(summary.get("slices") or []):
        its = spec.targets.violated(part)
        if (why := client_verdict(part, its)) is not None:
            its.append(why)
        start = part["window_at"][0] - summary["window_at"][0]
        slices.append({**{k: v for k, v in part.items() if k != "window_at"}, "index": i, "from_s": start, "broke": its})
    held = not broke and all(not s["broke"] for s in slices)
    rates = [s["output_tok_s"] for s in slices if s.get("output_tok_s") is not None]
    metrics: dict[str, float] = {
        "goodput": float(summary["output_tok_s"]),
        "held": float(held),
        "drift": drift(rates) if len(rates) >= 2 else 0.0,
        "slices": float(len(slices)),
        "slices_broken": float(sum(1 for s in slices if s["broke"])),
    }
    if summary.get("output_tok_s_ci") is not None:
        metrics["goodput_ci"] = float(summary["output_tok_s_ci"])
    metrics.update({m: float(summary[m]) for m in AT_RUN if summary.get(m) is not None})
    if spec.rate is not None and summary.get("achieved_over_offered") is not None:
        metrics["achieved_over_offered"] = float(summary["achieved_over_offered"])
    answer = {"concurrency": spec.concurrency} if spec.concurrency else {"rate": spec.rate}
    details = {
        **answer,
        "seconds": summary.get("window_s"),
        "broke": broke,
        "slices": slices,
        "window": {k: v for k, v in summary.items() if k not in ("slices", "batch_rates")},
    }
    logger.info("confirm: %s %s for %.0fs", "held" if held else "broke", answer, summary.get("window_s") or 0.0)
    return ProbeResult("confirm", metrics, details)


def drift(rates: list[float]) -> float:
    """The least-squares trend of the slices' goodput over the run, as a share of the mean: the
    change from the first slice to the last that the trend line says (0: flat)."""
    mean = statistics.fmean(rates)
    if not mean:
        return 0.0
    slope = statistics.linear_regression(range(len(rates)), rates).slope
    return slope * (len(rates) - 1) / mean
