"""What tuning bought: the pick against the space's baseline, both measured on fresh servers.

The baseline is the study's reference config (the space's first enqueued config: today's
production config, or the engine's defaults the space wrote down), run at the start of the search,
during it and, interleaved with the front candidates, at its end (:mod:`tuner.orchestration.validate`). The
pick is the knee every command names (:func:`tuner.results.pick.pick`). For each compared metric (the SLO
goodput and the load probe's throughput, where the study measured them) the statement is the
relative difference of the means over each config's runs (a disturbed run set aside) with its 95 %
half-width, or "a tie" where the difference is inside the combined noise: the number a user takes
to their team.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.base.exceptions import ConfigError
from tuner.base.metrics import LOAD_OUTPUT_TOK_S, SLO_GOODPUT
from tuner.results.noise import NoiseFloor, differs, half_width, is_noisy, set_aside
from tuner.results.pick import Candidate, objective_metrics, pick, role_index, study_floor
from tuner.trials import Studied, StudyRecord, TrialRecord, record_of

__all__ = ["COMPARED", "Gain", "gains"]

COMPARED = (SLO_GOODPUT, LOAD_OUTPUT_TOK_S)


@dataclass(frozen=True)
class Gain:
    """One metric, the pick against the baseline: means, 95 % half-widths and run counts."""

    metric: str
    pick: float
    pick_hw: float
    pick_runs: int
    baseline: float
    baseline_hw: float
    baseline_runs: int

    @property
    def relative(self) -> float:
        return (self.pick - self.baseline) / self.baseline if self.baseline else math.inf

    @property
    def relative_hw(self) -> float:
        return math.hypot(self.pick_hw, self.baseline_hw) / self.baseline if self.baseline else math.inf

    @property
    def tie(self) -> bool:
        return not differs(self.pick, self.pick_hw, self.baseline, self.baseline_hw)

    def describe(self) -> str:
        change = f"{self.relative:+.1%} +- {self.relative_hw:.1%}" if self.baseline else "the baseline measured 0"
        verdict = f"a tie ({change})" if self.tie else change
        return (
            f"{self.metric}: {verdict}: pick {self.pick:,.1f} +- {self.pick_hw:,.1f} ({self.pick_runs} run"
            f"{'s' if self.pick_runs != 1 else ''}), baseline {self.baseline:,.1f} +- {self.baseline_hw:,.1f} "
            f"({self.baseline_runs} run{'s' if self.baseline_runs != 1 else ''})"
        )


def gains(study: Studied, how: str = "knee") -> tuple[Candidate | None, list[Gain]]:
    """The pick and its gains over the baseline; (None, []) without a pick or a measured baseline."""
    record = record_of(study)
    try:
        chosen = pick(record, how)
    except ConfigError:
        return None, []
    baseline = _baseline_runs(record)
    if not baseline:
        return chosen, []
    floor = _floor(record)
    found = []
    for metric in COMPARED:
        ours = _runs_of(chosen.trial, metric)
        theirs = [m[metric] for m in baseline if metric in m]
        if not ours or not theirs or len(theirs) < len(baseline):
            continue
        if not floor.known and min(len(ours), len(theirs)) < 2:
            continue  # one run and no noise floor: no honest half-width to state
        found.append(
            Gain(
                metric,
                statistics.fmean(ours),
                _hw(ours, floor),
                len(ours),
                statistics.fmean(theirs),
                _hw(theirs, floor),
                len(theirs),
            )
        )
    return chosen, found


def _floor(study: StudyRecord) -> NoiseFloor:
    """The relative SD of the throughput objective between fresh servers: the floor of every compared metric."""
    names = objective_metrics(study)
    floor = study_floor(study, [is_noisy(m) for m in names])
    j = role_index(study, "throughput") or 0
    # the study's own floor only: "what tuning bought" compares two configs of this study on its own
    # fresh servers, and states nothing from one run each and an engine's prior
    return NoiseFloor((floor.relative_sd[j],), floor.dof) if floor.known and floor.prior is None else NoiseFloor((0.0,), 0)


def _hw(values: Sequence[float], floor: NoiseFloor) -> float:
    return half_width((statistics.fmean(values),), [(v,) for v in values], floor, (True,))[0]


def _without_aside(runs: Sequence[Sequence[float]], metrics: Sequence[Mapping[str, float]]) -> list[Mapping[str, float]]:
    """The runs' metrics without the run :func:`~tuner.results.noise.set_aside` names (judged on the first objective)."""
    aside = set_aside(runs) if len(runs) == len(metrics) else None
    return [m for i, m in enumerate(metrics) if aside is None or i != aside.index]


def _runs_of(trial: TrialRecord, metric: str) -> list[float]:
    """The trial's own value of ``metric`` and its re-runs' (a disturbed run set aside)."""
    again: Mapping[str, Any] = trial.revalidated or {}
    metrics = [trial.metrics, *again.get("metrics", [])]
    runs = again.get("runs") or [list(trial.values or ())]
    return [m[metric] for m in _without_aside(runs, metrics) if metric in m]


def _baseline_runs(record: StudyRecord) -> list[Mapping[str, float]]:
    """The reference config's runs' metrics (its own trial's first), a disturbed run set aside."""
    noise = record.noise
    return _without_aside(noise.get("runs") or [], noise.get("metrics") or [])
