"""Choosing a trial from a study: Pareto fronts, the knee, the max of one objective.

Only COMPLETE, feasible trials are candidates. Where a trial was re-measured (at the end of
`tune run`, or by `tune validate`), the mean of all its runs is used. Every value carries its
95 % half-width (:mod:`tuner.results.noise`): one config dominates another only where it is better by
more than the combined noise, and a pick names the candidates it ties with. `tune status`,
`pareto`, `export` and `report` all choose through :func:`pick`, so they name the same winner.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from optuna.trial import TrialState

from tuner.base.exceptions import ConfigError
from tuner.objectives import CONFIGURED_CONTEXT, ObjectiveSet, role_of
from tuner.results.confirmation import describe_step, uncorrected_failure
from tuner.results.noise import NoiseFloor, differs, half_width, is_noisy, kept, noise_floor, prior_floor, probe_cis, set_aside
from tuner.trials import Studied, StudyRecord, TrialRecord, record_of

__all__ = [
    "Candidate",
    "candidates",
    "context_metric",
    "context_of",
    "describe_noise",
    "hypervolume_2d",
    "non_dominated",
    "objective_metrics",
    "pareto_front",
    "pick",
    "record_of",
    "repeated_runs",
    "role_index",
    "signs",
    "stored_objectives",
    "study_floor",
    "tied_with",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Candidate:
    """A feasible trial's values (mean over its runs) with their 95 % half-widths."""

    trial: TrialRecord
    values: tuple[float, ...]
    revalidated: bool
    half_widths: tuple[float, ...] = ()
    runs: int = 1
    ties: tuple[int, ...] = ()

    @property
    def number(self) -> int:
        return self.trial.number

    def describe(self, names: Sequence[str]) -> str:
        """``name mean +- half-width`` per objective, the run count, and any tie."""
        parts = []
        for name, value, hw in zip(names, self.values, self.half_widths or [0.0] * len(self.values), strict=True):
            parts.append(f"{name} {value:,.1f}" + (f" +- {hw:,.1f}" if hw else ""))
        text = f"trial {self.number}: " + ", ".join(parts) + f" ({self.runs} run{'s' if self.runs > 1 else ''})"
        if self.ties:
            text += f"; ties within noise with trial(s) {', '.join(map(str, self.ties))}"
        if found := self.trial.confirmed:  # its long run at its SLO answer (tuner.orchestration.confirm)
            runs = found.get("runs") or ()
            verdict = "no result" if found.get("failure") and not runs else "held" if found.get("held") else "NOT held"
            text += f"; confirmed: {verdict} over {round(found.get('seconds', 0.0) / 60, 1):g} min at its SLO answer"
            if uncorrected_failure(found) and len(runs) > 1:
                text += f", nor at any step below it down to {describe_step(found, min(r.get('at', 0.0) for r in runs))}"
            if (kept := found.get("confirmed_answer")) and not found.get("held"):
                at = ", ".join(f"{v:g} {'requests/s' if k == 'rate' else 'clients'}" for k, v in kept.items())
                text += f", held a step below it: {at} (the answer now)"
        return text


def candidates(study: Studied) -> list[Candidate]:
    record = record_of(study)
    names = objective_metrics(record)
    noisy = [is_noisy(m) for m in names]
    floor = study_floor(record, noisy)
    found = []
    for t in record.with_state(TrialState.COMPLETE):
        if not t.feasible or t.duplicate_of is not None:  # a repeat proposal carries its original's result: one config, one point
            continue
        again = t.revalidated
        runs = [list(r) for r in kept(again["runs"])] if again and again.get("runs") else [list(t.values or ())]
        values = tuple(statistics.fmean(col) for col in zip(*runs, strict=True))
        # its re-runs are among those the floor pools
        hws = half_width(values, runs, floor, noisy, probe_cis(t.metrics, names), pooled=len(runs) > 1)
        found.append(Candidate(t, values, again is not None, hws, len(runs)))
    return found


def stored_objectives(study: Studied) -> ObjectiveSet | None:
    """The objective set the study was run with (roles inferred where it predates them)."""
    stored = _attrs(study).objectives
    try:
        return ObjectiveSet.model_validate(stored) if stored else None
    except ValueError:
        return None


def role_index(study: Studied, role: str) -> int | None:
    """The objective with ``role`` (``throughput``, ``context``, ...) in the study, if any."""
    record = _attrs(study)
    found = stored_objectives(record)
    if found is not None and len(found.objectives) == len(record.directions):
        return found.index_of(role)
    names = objective_metrics(record)
    return next((i for i, m in enumerate(names) if role_of(m) == role), None)


def context_metric(study: Studied) -> str:
    """The metric that says what context a config serves: the context-role objective (recall-
    verified where the study measures recall), else the per-request context it was configured to."""
    record = _attrs(study)
    j = role_index(record, "context")
    return objective_metrics(record)[j] if j is not None else CONFIGURED_CONTEXT


def context_of(study: Studied) -> Callable[[Candidate], float | None]:
    """A candidate's context: its context objective's mean, else its configured context."""
    j = role_index(_attrs(study), "context")
    if j is not None:
        return lambda c: c.values[j]
    return lambda c: c.trial.metrics.get(CONFIGURED_CONTEXT)


def objective_metrics(study: Studied) -> list[str]:
    """The metric behind each objective (e.g. ``load.output_tok_s``)."""
    record = _attrs(study)
    stored = (record.objectives or {}).get("objectives", [])
    names = [o["metric"] for o in stored] or list(record.metric_names or [])
    count = len(record.directions)
    return names if len(names) == count else [f"value{i}" for i in range(count)]


def _attrs(study: Studied) -> StudyRecord:
    """The record, or the live study's own attrs read without its trials (what a one-question
    caller such as the driver needs)."""
    return record_of(study, trials=False)


def study_floor(
    study: Studied, noisy: Sequence[bool], reference: Sequence[Sequence[Sequence[float]]] | None = None
) -> NoiseFloor:
    """The study's noise floor from every config it measured more than once (``reference``: the
    reference config's runs in groups measured close in time, when newer than those stored);
    until it measured one, the engine's fresh-server spread on its hardware (a prior, labelled:
    a one-run interval must cover a fresh server, never the window's CI alone)."""
    record = _attrs(study)  # once: the re-runs, the reference and the prior
    groups = reference_groups(record.noise) if reference is None else reference
    floor = noise_floor([*_revalidated_runs(record), *groups], noisy)
    if floor.known or not record.noise_prior:
        return floor
    return prior_floor(record.noise_prior, noisy)


def repeated_runs(study: Studied) -> list[Sequence[Sequence[float]]]:
    """Every config the study measured more than once, as its runs' objective values: the
    re-measured candidates, and the reference grouped by when it ran."""
    record = _attrs(study)
    return [*_revalidated_runs(record), *reference_groups(record.noise)]


def _revalidated_runs(record: StudyRecord) -> list[Sequence[Sequence[float]]]:
    return [kept(v["runs"]) for v in record.revalidated.values() if v.get("runs")]


def reference_groups(noise: Mapping[str, Any]) -> list[list[Sequence[float]]]:
    """The reference's runs grouped by when they ran (its trial and the start together, each
    pause, the end): spread within a group is noise, a shift between groups is drift, and drift
    must not widen the floor it is judged against."""
    groups: dict[str, list[Sequence[float]]] = {}
    runs, labels = noise.get("runs", []), noise.get("labels", [])
    aside = set_aside(runs)  # over all of the reference's runs: one config, whenever it ran
    for i, (run, label) in enumerate(zip(runs, labels, strict=False)):
        if aside is None or i != aside.index:
            groups.setdefault("start" if label in ("trial", "start") else label, []).append(run)
    return list(groups.values())


def signs(study: Studied) -> list[float]:
    """+1 for each maximized objective, -1 for each minimized one."""
    return [1.0 if d == "maximize" else -1.0 for d in _attrs(study).directions]


def non_dominated(items: Sequence[T], coords: Callable[[T], Sequence[float]]) -> list[T]:
    """Items no other item dominates, every coordinate maximized."""

    def dominates(a: Sequence[float], b: Sequence[float]) -> bool:
        return all(x >= y for x, y in zip(a, b, strict=True)) and any(x > y for x, y in zip(a, b, strict=True))

    points = [tuple(coords(i)) for i in items]
    return [i for i, p in zip(items, points, strict=True) if not any(dominates(o, p) for o in points if o is not p)]


def pareto_front(items: Sequence[Candidate], signs: Sequence[float]) -> list[Candidate]:
    """Candidates no other candidate dominates by more than the noise (objectives turned into
    maximization by ``signs``): a config within noise of a better one stays on the front.

    ``a`` dominates ``b`` when its mean is at least as good on every objective and better beyond
    the noise on one. "Not worse beyond the noise" is not enough: a config measured with a wide
    CI would then push out every config with a higher mean on that objective (the x2 night: 2,000
    +- 1,956 tok/s with the most KV hid 3,346 +- 1,020 tok/s, the study's fastest)."""

    def beats(a: Candidate, b: Candidate, j: int) -> bool:
        ha, hb = _hw(a, j), _hw(b, j)
        return signs[j] * (a.values[j] - b.values[j]) > 0 and differs(a.values[j], ha, b.values[j], hb)

    def dominates(a: Candidate, b: Candidate) -> bool:
        objectives = range(len(signs))
        return all(signs[j] * (a.values[j] - b.values[j]) >= 0 for j in objectives) and any(beats(a, b, j) for j in objectives)

    return [c for c in items if not any(dominates(o, c) for o in items if o is not c)]


def _hw(c: Candidate, j: int) -> float:
    return c.half_widths[j] if c.half_widths else 0.0


def tied_with(best: Candidate, items: Sequence[Candidate], objectives: Sequence[int]) -> list[Candidate]:
    """Candidates within the combined noise of ``best`` on every one of ``objectives``."""
    return [
        c
        for c in items
        if c is not best and not any(differs(best.values[j], _hw(best, j), c.values[j], _hw(c, j)) for j in objectives)
    ]


def describe_noise(study: Studied) -> list[str]:
    """The study's noise floor, its reference config's runs and any drift, as lines to show."""
    record = _attrs(study)
    names = objective_metrics(record)
    floor = study_floor(record, [is_noisy(m) for m in names])
    if not floor.known:
        return ["noise floor: not measured (no config ran on two fresh servers yet); ties use the probe's own CI"]
    if floor.prior is not None:
        return [
            f"noise floor: not measured in this study yet; a prior of {floor.relative_sd[0]:.1%} relative SD between fresh "
            f"servers ({floor.prior}) widens every one-run interval"
        ]
    lines = [
        f"noise floor: {floor.relative_sd[0]:.1%} relative SD of {names[0]} between fresh servers ({floor.dof} degrees of "
        "freedom)"
    ]
    noise = record.noise
    if noise.get("runs"):
        values = ", ".join(f"{r[0]:,.1f} ({label})" for r, label in zip(noise["runs"], noise["labels"], strict=True))
        lines.append(f"reference config {noise.get('reference')}: {values}")
        if (aside := set_aside(noise["runs"])) is not None:
            lines.append(
                f"set aside: the reference's run {aside.index + 1} ({noise['labels'][aside.index]}), {aside.describe()}: a "
                "disturbed "
                "measurement (a busy machine?), kept out of the floor"
            )
    for number, value in sorted(record.revalidated.items()):
        if (aside := set_aside(value.get("runs") or [])) is not None:
            lines.append(
                f"set aside: trial {number}'s run {aside.index + 1}, {aside.describe()}: kept out of its mean and the floor"
            )
    if noise.get("drift") is not None:
        lines.append(f"DRIFT: the reference moved {noise['drift']:+.1%} between the start and the end of the run")
    return lines


def hypervolume_2d(points: Sequence[tuple[float, float]], reference: tuple[float, float]) -> float:
    """Area dominated by ``points`` (both maximized) above ``reference``."""
    useful = sorted({(x, y) for x, y in points if x > reference[0] and y > reference[1]}, key=lambda p: -p[0])
    area, best_y = 0.0, reference[1]
    for x, y in useful:
        if y > best_y:
            area += (x - reference[0]) * (y - best_y)
            best_y = y
    return area


def pick(study: Studied, how: str = "knee", *, min_context: float | None = None) -> Candidate:
    """``knee`` | ``max-throughput`` | ``max-context`` | ``trial:N``; the result names its ties."""
    record = record_of(study)
    items = candidates(record)
    if match := re.fullmatch(r"trial:(\d+)", how):
        number = int(match[1])
        asked = record.trials
        if number < len(asked) and asked[number].duplicate_of is not None:
            number = asked[number].source  # a repeat proposal is its original
        chosen = [c for c in items if c.number == number]
        if not chosen:
            raise ConfigError(f"trial {number} of study {record.name!r} is not a complete, feasible trial")
        return chosen[0]
    context = context_of(record)
    every = items
    if min_context is not None:
        items = [c for c in items if (context(c) or 0) >= min_context]
    if not items:
        what = f" with {context_metric(record)} >= {min_context:g}" if min_context is not None else ""
        offer = ""
        if min_context is not None and any(context(c) is not None for c in every):
            most = pick(record, "max-context")  # what the study can offer instead
            offer = f" (the most it reached: {context(most):,.0f}, trial {most.number}, `--min-context {context(most):.0f}`)"
        raise ConfigError(f"study {record.name!r} has no complete, feasible trial to pick{what}{offer}")
    signs_ = signs(record)
    throughput = role_index(record, "throughput") or 0
    if how == "max-throughput":
        return _with_ties(_best(items, signs_, throughput), items, signs_, throughput)
    if how == "max-context":
        reported = [(c, at) for c in items if (at := context(c)) is not None]
        known = [c for c, _ in reported]
        if not known:
            raise ConfigError(f"max-context: no candidate of study {record.name!r} reports {context_metric(record)}")
        top = max(at for _, at in reported)
        at_top = [c for c in known if context(c) == top]
        return _with_ties(_best(at_top, signs_, throughput), at_top, signs_, throughput)
    if how == "knee":
        front = pareto_front(items, signs_)
        knee = _knee(front, signs_)
        return replace(knee, ties=tuple(c.number for c in tied_with(knee, front, range(len(signs_)))))
    raise ConfigError(f"--pick: {how!r} is not one of knee, max-throughput, max-context, trial:N")


def _best(items: Sequence[Candidate], signs: Sequence[float], j: int) -> Candidate:
    """The best mean on objective ``j``; the other objectives, then the trial number, break exact ties."""
    return max(items, key=lambda c: (signs[j] * c.values[j], *[s * v for s, v in zip(signs, c.values, strict=True)], -c.number))


def _with_ties(best: Candidate, items: Sequence[Candidate], signs: Sequence[float], j: int) -> Candidate:
    return replace(best, ties=tuple(c.number for c in tied_with(best, items, (j,))))


def _knee(front: list[Candidate], signs: Sequence[float]) -> Candidate:
    """The front point closest to the ideal point after scaling each objective to [0, 1]."""
    if len(front) == 1:
        return front[0]
    columns = list(zip(*[[s * v for s, v in zip(signs, c.values, strict=True)] for c in front], strict=True))
    lows, highs = [min(col) for col in columns], [max(col) for col in columns]

    def distance(c: Candidate) -> float:
        scaled = [(s * v - lo) / (hi - lo) if hi > lo else 1.0 for s, v, lo, hi in zip(signs, c.values, lows, highs, strict=True)]
        return math.dist(scaled, [1.0] * len(scaled))

    return min(front, key=lambda c: (distance(c), c.number))
