"""Re-validation: re-run the top configs of a study on fresh servers and keep mean and spread.

A config picked as best on one measurement often degrades once redeployed (TUNA found 63 % of
such picks lost >= 30 %). The re-validated values are stored in the study (user attribute
``revalidated.<trial>``: Optuna forbids changing finished trials) and `tune export` picks by them.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import optuna

from tuner.artifacts import RunDir
from tuner.exceptions import ConfigInfeasible, TunerError
from tuner.objectives import ObjectiveSet
from tuner.partitions import PartitionPool, trial_size
from tuner.pick import REVALIDATED, Candidate, candidates, pareto_front, signs
from tuner.space import SearchSpace
from tuner.trial import run_trial

__all__ = ["Revalidation", "revalidate", "top_candidates"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Revalidation:
    trial: int
    original: tuple[float, ...]
    runs: tuple[tuple[float, ...], ...]
    failures: tuple[str, ...]

    @property
    def mean(self) -> tuple[float, ...]:
        return tuple(statistics.fmean(col) for col in zip(*self.runs, strict=True)) if self.runs else ()

    @property
    def spread(self) -> tuple[float, ...]:
        """(max - min) / mean per objective, over the re-validation runs."""
        cols = list(zip(*self.runs, strict=True))
        return tuple((max(c) - min(c)) / statistics.fmean(c) if statistics.fmean(c) else 0.0 for c in cols)

    @property
    def change(self) -> tuple[float, ...]:
        """Re-validated mean relative to the original measurement, per objective."""
        return tuple((m - o) / o if o else 0.0 for m, o in zip(self.mean, self.original, strict=True))

    def to_dict(self) -> dict:
        return {"values": list(self.mean), "runs": [list(r) for r in self.runs], "spread": list(self.spread), "failures": list(self.failures)}


def top_candidates(study: optuna.Study, top: int) -> list[Candidate]:
    """The Pareto front first (best first objective first), then the rest by the first objective."""
    direction = signs(study)
    items = candidates(study)
    front = pareto_front(items, direction)
    rest = [c for c in items if c not in front]
    key = lambda c: -direction[0] * c.trial.values[0]  # noqa: E731
    return (sorted(front, key=key) + sorted(rest, key=key))[:top]


def revalidate(
    study: optuna.Study,
    space: SearchSpace,
    objective: ObjectiveSet,
    run_dir: RunDir,
    *,
    top: int,
    repeats: int,
    on_run: Callable[[int, int, str], None] | None = None,
) -> list[Revalidation]:
    pool = PartitionPool(space.hardware.kind, space.hardware.devices)
    results = []
    for cand in top_candidates(study, top):
        params = dict(cand.trial.params)
        partition = pool.acquire(trial_size(space.hardware.per_trial, params))
        assert partition is not None
        runs, failures = [], []
        for r in range(repeats):
            where = run_dir.root / "validate" / f"{cand.number}-{r}"
            try:
                values = objective.evaluate(run_trial(space, params, where, partition)).values
                runs.append(values)
                text = " ".join(f"{v:.1f}" for v in values)
            except (ConfigInfeasible, TunerError, KeyError) as exc:
                evidence = getattr(exc, "evidence", None)
                text = evidence.describe() if evidence else f"{type(exc).__name__}: {exc}"
                failures.append(text)
            if on_run:
                on_run(cand.number, r, text)
        pool.release(partition)
        result = Revalidation(cand.number, tuple(cand.trial.values), tuple(runs), tuple(failures))
        if runs:
            study.set_user_attr(f"{REVALIDATED}.{cand.number}", result.to_dict())
        results.append(result)
    return results
