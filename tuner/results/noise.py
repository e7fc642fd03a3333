"""A study's measurement noise, and what it means for comparing two configs.

Two sources of noise are kept apart:

- within a server: the load probe's batch-means CI of output tok/s (``load.output_tok_s_ci``);
- between fresh servers of the same config: the study's *noise floor*, the pooled relative
  standard deviation of every config the study measured more than once (its reference config
  at the start and end of a run, and the front candidates re-measured at the end).

A value's 95 % half-width combines both; two values differ only when their difference exceeds
the combined half-width (:func:`differs`), else they are a tie. Only load metrics are noisy:
recall-verified context and capacity come from the engine and the needle ladder, exactly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.base.stats import t975

__all__ = [
    "NoiseFloor",
    "Outlier",
    "differs",
    "half_width",
    "is_noisy",
    "kept",
    "noise_floor",
    "prior_floor",
    "probe_cis",
    "set_aside",
]

Z95 = 1.959964


def is_noisy(metric: str) -> bool:
    """Measured under load, so it varies between fresh servers (the load and SLO probes' figures)."""
    return metric.startswith(("load.", "slo."))


@dataclass(frozen=True)
class NoiseFloor:
    """Relative standard deviation between fresh servers, per objective, and its degrees of
    freedom; ``prior``: where it was measured, when it is the engine's figure on this hardware
    rather than the study's own (a study that has not measured a config twice yet)."""

    relative_sd: tuple[float, ...]
    dof: int
    prior: str | None = None

    @property
    def known(self) -> bool:
        return self.dof > 0


def prior_floor(prior: Mapping[str, Any], noisy: Sequence[bool]) -> NoiseFloor:
    """The engine's fresh-server spread (``relative_sd``, ``dof``, ``source``) as a floor for the noisy objectives."""
    sd = float(prior["relative_sd"])
    return NoiseFloor(tuple(sd if n else 0.0 for n in noisy), int(prior.get("dof") or 1), str(prior.get("source") or "prior"))


@dataclass(frozen=True)
class Outlier:
    """A run set aside: far outside the same config's other runs (a disturbed measurement)."""

    index: int
    value: float
    median_of_others: float
    threshold: float

    def describe(self) -> str:
        change = self.value / self.median_of_others - 1.0 if self.median_of_others else float("nan")
        return (
            f"{self.value:,.1f} is {change:+.0%} from the median {self.median_of_others:,.1f} of the config's other runs "
            f"(more than {self.threshold:,.1f} away: {OUTLIER_SDS:g} robust SDs, at least {OUTLIER_MIN:.0%})"
        )


OUTLIER_SDS = 4.0  # robust SDs (1.4826 x the median absolute deviation of the other runs)
OUTLIER_MIN = 0.25  # ... and never closer than this relative distance: ordinary run-to-run spread is not an outlier


def set_aside(runs: Sequence[Sequence[float]], column: int = 0) -> Outlier | None:
    """The one run of a config (``runs``: its runs' objective values) that lies far outside the
    others on ``column`` (throughput), or None. Needs three runs: with two, neither can be told
    the odd one out. One disturbed run (the machine busy during it: 2.5 tok/s beside 47-54) would
    otherwise set a floor that turns every comparison of the study into a tie."""
    if len(runs) < 3:
        return None
    values = [float(r[column]) for r in runs]
    best: Outlier | None = None
    for i, value in enumerate(values):
        others = values[:i] + values[i + 1 :]
        median = statistics.median(others)
        mad = statistics.median(abs(v - median) for v in others)
        threshold = max(OUTLIER_SDS * 1.4826 * mad, OUTLIER_MIN * abs(median))
        if abs(value - median) > threshold and (
            best is None or abs(value - median) / threshold > abs(best.value - best.median_of_others) / best.threshold
        ):
            best = Outlier(i, value, median, threshold)
    return best


def kept(runs: Sequence[Sequence[float]]) -> list[Sequence[float]]:
    """``runs`` without the one :func:`set_aside` names."""
    out = set_aside(runs)
    return [r for i, r in enumerate(runs) if out is None or i != out.index]


def probe_cis(metrics: Mapping[str, float], names: Sequence[str]) -> dict[int, float]:
    """A run's own CI (the probe's ``<metric>_ci``) per objective index, where it reported one."""
    return {j: float(metrics[f"{m}_ci"]) for j, m in enumerate(names) if f"{m}_ci" in metrics}


def noise_floor(repeated: Sequence[Sequence[Sequence[float]]], noisy: Sequence[bool]) -> NoiseFloor:
    """Pooled relative SD per objective over configs measured more than once.

    ``repeated``: per config, its runs' objective values."""
    width = len(noisy)
    num, dof = [0.0] * width, 0
    for runs in repeated:
        if len(runs) < 2:
            continue
        dof += len(runs) - 1
        for j in range(width):
            column = [r[j] for r in runs]
            mean = statistics.fmean(column)
            if noisy[j] and mean:
                num[j] += (len(runs) - 1) * (statistics.stdev(column) / mean) ** 2
    return NoiseFloor(tuple(math.sqrt(n / dof) if dof else 0.0 for n in num), dof)


def half_width(
    values: Sequence[float],
    runs: Sequence[Sequence[float]],
    floor: NoiseFloor,
    noisy: Sequence[bool],
    within: Mapping[int, float] | None = None,
    *,
    pooled: bool = False,
) -> tuple[float, ...]:
    """95 % half-width per objective of a config measured ``len(runs)`` times (mean ``values``).

    One run: the probe's own CI (``within``: objective index -> half-width) combined with the
    floor. Several runs: Student-t over the runs, the SD never below the floor nor below the SD
    the probe's own CI implies (``within`` / 1.96: a fresh server's figure varies at least as much
    as one window measures it to). Two or three runs can agree by chance where the load comes in
    whole requests: the tests' tiny space streams 40.0 tok/s in most 0.4 s sub-windows and 30-42 in
    some, so a run's figure is 40.0 or 36.0 or so; `tune compare --repeats 2` of one config against
    itself said "b's pick beats a's by +7.6 %" from 36.0, 36.0 against 39.0, 38.5, a spread the
    runs' own CIs (+- 6.8 for a run of 36.0) would not have allowed.

    Degrees of freedom: the runs' k - 1 plus the floor's, or the floor's alone when ``pooled`` (the
    runs are among those the floor pools, as a re-measured candidate's and a compared pick's are:
    counted twice, two picks of two runs each got t(3) = 3.18 for t(2) = 4.30)."""
    within = within or {}
    k = max(1, len(runs))
    result = []
    for j, value in enumerate(values):
        if not noisy[j]:
            result.append(0.0)
            continue
        floor_sd = floor.relative_sd[j] * abs(value) if floor.known else 0.0
        if k == 1:
            result.append(math.hypot(within.get(j, 0.0), Z95 * floor_sd))
            continue
        sd = max(statistics.stdev(r[j] for r in runs), floor_sd, within.get(j, 0.0) / Z95)
        dof = (floor.dof if floor.known else 0) + (0 if pooled and floor.known else k - 1)
        result.append(t975(dof) * sd / math.sqrt(k))
    return tuple(result)


def differs(a: float, ha: float, b: float, hb: float) -> bool:
    """True when ``a`` and ``b`` differ by more than their combined 95 % half-widths."""
    return abs(a - b) > math.hypot(ha, hb)
