"""Fronts of several studies on two chosen metrics, with hypervolume against a shared reference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import TrialState

from tuner.results.pick import Candidate, candidates, hypervolume_2d, non_dominated, objective_metrics, pareto_front, signs
from tuner.trials import Studied, StudyRecord, TrialRecord, record_of

__all__ = ["Point", "StudyFront", "fronts"]


@dataclass(frozen=True)
class Point:
    trial: int
    x: float | None
    y: float | None
    state: str
    feasible: bool
    signature: str | None
    params: dict[str, Any]
    x_hw: float | None = None  # 95 % half-widths: the pick's noise-aware ones for an objective, else the probe's CI
    y_hw: float | None = None

    def xy(self) -> tuple[float, float]:
        """Both coordinates, for a point known to have them (a front point, a measured one)."""
        if self.x is None or self.y is None:
            raise ValueError(f"trial {self.trial} has no {'x' if self.x is None else 'y'} value")
        return self.x, self.y


@dataclass
class StudyFront:
    name: str
    points: list[Point]
    front: list[Point] = field(default_factory=list)
    hypervolume: float = 0.0

    @property
    def faint(self) -> list[Point]:
        """Pruned, failed-to-start or infeasible trials: drawn faintly, with their signature."""
        return [p for p in self.points if not p.feasible]


def _value(trial: TrialRecord, metric: str, means: dict[str, float] | None) -> float | None:
    if means and metric in means:
        return means[metric]  # a re-measured trial's mean over its fresh-server runs
    return trial.metrics.get(metric)


def _half_width(trial: TrialRecord, metric: str, widths: dict[str, float] | None) -> float | None:
    if widths and metric in widths:
        return widths[metric]  # what the pick compares with: window CI, noise floor or the runs' spread
    ci = trial.metrics.get(f"{metric}_ci")
    return None if ci is None else float(ci)


def points(study: StudyRecord, x: str, y: str, items: list[Candidate]) -> list[Point]:
    """Every launched trial at (x, y); a candidate's objectives at their mean over its runs, with
    the half-widths the pick uses (other metrics: the probe's own ``<metric>_ci`` where it has one)."""
    names = objective_metrics(study)
    means = {c.number: dict(zip(names, c.values, strict=True)) for c in items}
    widths = {c.number: dict(zip(names, c.half_widths, strict=True)) for c in items if c.half_widths}
    found = []
    for t in study.with_state(TrialState.COMPLETE, TrialState.PRUNED):
        if t.invalid_combination is not None:
            continue
        ok = t.state == TrialState.COMPLETE and t.feasible
        signature = t.signature or ("infeasible" if t.state == TrialState.COMPLETE and not ok else None)
        m, w = means.get(t.number), widths.get(t.number)
        x_hw, y_hw = (_half_width(t, metric, w) if ok else None for metric in (x, y))
        found.append(Point(t.number, _value(t, x, m), _value(t, y, m), t.state.name, ok, signature, dict(t.params), x_hw, y_hw))
    return found


def _front(study: StudyRecord, pts: list[Point], x: str, y: str, items: list[Candidate]) -> list[Point]:
    """On the study's own two objectives: the noise-aware front that picks use. On other
    metrics: plain dominance of the measured values."""
    usable = [p for p in pts if p.feasible and p.x is not None and p.y is not None]
    if sorted(objective_metrics(study)) == sorted([x, y]):
        on_front = {c.number for c in pareto_front(items, signs(study))}
        chosen = [p for p in usable if p.trial in on_front]
    else:
        chosen = non_dominated(usable, Point.xy)
    return sorted(chosen, key=lambda p: p.xy()[0])


def fronts(studies: Mapping[str, Studied], x: str, y: str, reference: tuple[float, float] = (0.0, 0.0)) -> list[StudyFront]:
    """Both metrics maximized; one reference point for every study so hypervolumes compare."""
    result = []
    for name, studied in studies.items():
        study = record_of(studied)
        items = candidates(study)
        pts = points(study, x, y, items)
        front = _front(study, pts, x, y, items)
        hv = hypervolume_2d([p.xy() for p in front], reference)
        result.append(StudyFront(name, pts, front, hv))
    return result
