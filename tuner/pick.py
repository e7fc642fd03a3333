"""Choosing a trial from a study: Pareto fronts, the knee, the max of one objective.

Only COMPLETE, feasible trials are candidates. Where a trial was re-validated (`tune validate`),
its re-validated values are used instead of the first measurement.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.exceptions import ConfigError

__all__ = ["Candidate", "candidates", "feasible", "hypervolume_2d", "non_dominated", "pareto_front", "pick", "signs"]

REVALIDATED = "revalidated"
T = TypeVar("T")


@dataclass(frozen=True)
class Candidate:
    trial: FrozenTrial
    values: tuple[float, ...]
    revalidated: bool

    @property
    def number(self) -> int:
        return self.trial.number


def feasible(trial: FrozenTrial) -> bool:
    """Optuna's convention: every constraint value <= 0."""
    return all(v <= 0 for v in trial.constraints.values())


def candidates(study: optuna.Study) -> list[Candidate]:
    found = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if not feasible(t):
            continue
        again = study.user_attrs.get(f"{REVALIDATED}.{t.number}")
        values = tuple(again["values"]) if again else tuple(t.values)
        found.append(Candidate(t, values, again is not None))
    return found


def signs(study: optuna.Study) -> list[float]:
    """+1 for each maximized objective, -1 for each minimized one."""
    return [1.0 if d == optuna.study.StudyDirection.MAXIMIZE else -1.0 for d in study.directions]


def non_dominated(items: Sequence[T], coords: Callable[[T], Sequence[float]]) -> list[T]:
    """Items no other item dominates, every coordinate maximized."""

    def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
        return all(x >= y for x, y in zip(a, b, strict=True)) and any(x > y for x, y in zip(a, b, strict=True))

    points = [tuple(coords(i)) for i in items]
    return [i for i, p in zip(items, points, strict=True) if not any(dominates(o, p) for o in points if o is not p)]


def pareto_front(items: Sequence[Candidate], signs: Sequence[float]) -> list[Candidate]:
    """Non-dominated candidates (all objectives turned into maximization by ``signs``)."""
    return non_dominated(items, lambda c: [s * v for s, v in zip(signs, c.values, strict=True)])


def hypervolume_2d(points: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """Area dominated by ``points`` (both maximized) above ``reference``."""
    useful = sorted({(x, y) for x, y in points if x > reference[0] and y > reference[1]}, key=lambda p: -p[0])
    area, best_y = 0.0, reference[1]
    for x, y in useful:
        if y > best_y:
            area += (x - reference[0]) * (y - best_y)
            best_y = y
    return area


def pick(study: optuna.Study, how: str = "knee", *, min_context: float | None = None, context_index: int = 1) -> Candidate:
    """``knee`` | ``max-throughput`` | ``max-context`` | ``trial:N``."""
    items = candidates(study)
    if match := re.fullmatch(r"trial:(\d+)", how):
        number = int(match[1])
        chosen = [c for c in items if c.number == number]
        if not chosen:
            raise ConfigError(f"trial {number} of study {study.study_name!r} is not a complete, feasible trial")
        return chosen[0]
    if min_context is not None and len(study.directions) > context_index:
        items = [c for c in items if c.values[context_index] >= min_context]
    if not items:
        raise ConfigError(f"study {study.study_name!r} has no complete, feasible trial to pick" + (f" with context >= {min_context:g}" if min_context else ""))
    signs_ = signs(study)
    if how == "max-throughput":
        return max(items, key=lambda c: signs_[0] * c.values[0])
    if how == "max-context":
        if len(signs_) <= context_index:
            raise ConfigError("max-context needs a study with a context objective")
        return max(items, key=lambda c: (signs_[context_index] * c.values[context_index], signs_[0] * c.values[0]))
    if how == "knee":
        return _knee(pareto_front(items, signs_), signs_)
    raise ConfigError(f"--pick: {how!r} is not one of knee, max-throughput, max-context, trial:N")


def _knee(front: list[Candidate], signs: Sequence[float]) -> Candidate:
    """The front point closest to the ideal point after scaling each objective to [0, 1]."""
    if len(front) == 1:
        return front[0]
    columns = list(zip(*[[s * v for s, v in zip(signs, c.values, strict=True)] for c in front], strict=True))
    lows, highs = [min(col) for col in columns], [max(col) for col in columns]

    def distance(c: Candidate) -> float:
        scaled = [
            (s * v - lo) / (hi - lo) if hi > lo else 1.0
            for s, v, lo, hi in zip(signs, c.values, lows, highs, strict=True)
        ]
        return math.dist(scaled, [1.0] * len(scaled))

    return min(front, key=lambda c: (distance(c), c.number))
