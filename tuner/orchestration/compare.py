"""Compare the picks of several studies on equal terms: each study's chosen config on fresh
servers, interleaved round by round (host drift hits all alike), in one run, with the noise floor
those runs and the studies' own repeats give. Two runs of a tune that explored different configs
can then say whether their winners differ or tie. A pick's run far outside its others (a disturbed
measurement, :func:`~tuner.results.noise.set_aside`) is left out of its mean and the floor, as the
re-validation and the pick leave it out. Nothing is written to the studies."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from tuner.base.artifacts import RunDir
from tuner.base.exceptions import ConfigError
from tuner.launching.executors import Executor
from tuner.objectives import ObjectiveSet
from tuner.orchestration.validate import remeasure
from tuner.results.noise import NoiseFloor, Outlier, differs, half_width, is_noisy, noise_floor, set_aside
from tuner.results.pick import Candidate, objective_metrics, pick, repeated_runs
from tuner.space import SearchSpace
from tuner.trials import Studied, record_of

__all__ = ["Compared", "compare"]


@dataclass(frozen=True)
class Compared:
    """One study's pick, re-measured: its runs' objective values, and the mean and 95 % half-width
    of those it counts (all but ``aside``, the run set aside as disturbed, if any)."""

    study: str
    candidate: Candidate
    runs: tuple[tuple[float, ...], ...]
    failures: tuple[str, ...]
    mean: tuple[float, ...]
    half_width: tuple[float, ...]
    aside: Outlier | None = None


def compare(
    studies: Mapping[str, Studied],
    space: SearchSpace,
    objective: ObjectiveSet,
    run_dir: RunDir,
    executor: Executor,
    *,
    repeats: int,
    how: str = "knee",
    on_run: Callable[[str, int, str], None] | None = None,
) -> tuple[list[Compared], NoiseFloor, list[str]]:
    """Re-measure each study's pick ``repeats`` times; returns the results, the floor used and one
    verdict line per pair (on the first objective: differs beyond the combined noise, or a tie)."""
    names = list(objective.metric_names)
    records = {name: record_of(study) for name, study in studies.items()}  # each read once
    picks = {}
    for name, record in records.items():
        if objective_metrics(record) != names:
            raise ConfigError(f"study {name!r} has objectives {objective_metrics(record)}, not {names}: nothing to compare")
        picks[name] = pick(record, how)
    items = [(f"{name}-trial{c.number}", dict(c.trial.params)) for name, c in picks.items()]
    state = remeasure(space, objective, run_dir, executor, items, repeats=repeats, on_run=on_run)
    noisy = [is_noisy(m) for m in names]
    asides = {label: set_aside(state[label].values) for label, _ in items}
    counted = {  # the runs each pick's mean, half-width and the floor count: all but its aside
        label: [i for i in range(len(state[label].values)) if aside is None or i != aside.index]
        for label, aside in asides.items()
    }
    runs = {label: [state[label].values[i] for i in counted[label]] for label in counted}
    repeated: list[Sequence[Sequence[float]]] = [*runs.values()]
    repeated += [study_runs for record in records.values() for study_runs in repeated_runs(record)]
    floor = noise_floor(repeated, noisy)
    results = []
    for (label, _), (name, cand) in zip(items, picks.items(), strict=True):
        mean = tuple(statistics.fmean(col) for col in zip(*runs[label], strict=True)) if runs[label] else ()
        within = _within([state[label].within[i] for i in counted[label]])
        hw = half_width(mean, runs[label], floor, noisy, within, pooled=True) if runs[label] else ()
        item = state[label]
        results.append(Compared(name, cand, tuple(item.values), tuple(item.failures), mean, hw, asides[label]))
    return results, floor, _verdicts(results, names[0])


def _within(cis: list[dict[int, float]]) -> dict[int, float]:
    """The runs' probe CIs per objective, as one: their root mean square (a run without one, all its
    sub-windows alike, counts as 0)."""
    given = {j for ci in cis for j in ci}
    return {j: math.sqrt(statistics.fmean(ci.get(j, 0.0) ** 2 for ci in cis)) for j in given}


def _verdicts(results: list[Compared], metric: str) -> list[str]:
    lines = []
    for a, b in combinations([r for r in results if r.runs], 2):
        if differs(a.mean[0], a.half_width[0], b.mean[0], b.half_width[0]):
            hi, lo = (a, b) if a.mean[0] > b.mean[0] else (b, a)
            lines.append(
                f"{hi.study}'s pick beats {lo.study}'s on {metric} by {hi.mean[0] / lo.mean[0] - 1:+.1%}, beyond the noise"
            )
        else:
            gap = abs(a.mean[0] - b.mean[0])
            lines.append(
                f"{a.study}'s and {b.study}'s picks tie on {metric}: they differ by {gap:,.1f}, "
                f"inside the combined 95 % noise of {(a.half_width[0] ** 2 + b.half_width[0] ** 2) ** 0.5:,.1f}"
            )
    return lines
