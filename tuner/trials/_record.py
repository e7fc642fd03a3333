"""The one reader of what a study stores: frozen records built from Optuna's trials and study attrs.

Every module that reads a study reads :class:`TrialRecord` and :class:`StudyRecord`; the attribute
names live in :mod:`tuner.trials._keys` only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.base.metrics import (
    SLO_AT_LEVEL,
    SLO_AT_RATE,
    SLO_CONCURRENCY,
    SLO_CONCURRENCY_VIOLATED,
    SLO_GOODPUT,
    SLO_GOODPUT_CI,
    SLO_GOODPUT_PER_GPU,
    SLO_GOODPUT_PER_GPU_CI,
    SLO_HELD_S,
    SLO_RATE,
    SLO_RATE_VIOLATED,
)
from tuner.trials import _keys as k

__all__ = ["Kind", "StudyRecord", "TrialRecord", "read_lease", "read_study", "read_trials"]


class Kind(enum.Enum):
    """How a trial came to be: launched (a server was started for it, or was to be), or not."""

    LAUNCHED = "launched"
    INVALID = "invalid"  # broke one of the space's constraints: pruned at once
    SCREENED = "screened"  # the pre-screen predicted its failure from the study's own evidence
    COPY = "copy"  # a config the study had launched already: its result copied


def _kind(attrs: Mapping[str, Any]) -> Kind:
    if k.INVALID in attrs:
        return Kind.INVALID
    if attrs.get(k.SCREENED):
        return Kind.SCREENED
    if k.DUPLICATE_OF in attrs:
        return Kind.COPY
    return Kind.LAUNCHED


def named_constraints(found: Mapping[str, float]) -> dict[str, float]:
    """Constraint values by name, without the plain list kept for optuna-dashboard (Optuna reads
    it back as keys "0", "1", ...); a trial stored with the list only keeps those."""
    named = {key: v for key, v in found.items() if not key.isdigit()}
    return named or dict(found)


@dataclass(frozen=True)
class TrialRecord:
    """One trial as tuner stored it. ``values``: the objectives as its own trial measured them;
    ``revalidated``: its re-runs on fresh servers (``runs``: the trial's own first), when any."""

    number: int
    state: TrialState
    params: Mapping[str, Any]
    values: tuple[float, ...] | None = None
    constraints: Mapping[str, float] = field(default_factory=dict)
    kind: Kind = Kind.LAUNCHED
    datetime_start: datetime | None = None
    datetime_complete: datetime | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    capacity: Mapping[str, Any] = field(default_factory=dict)
    timings: Mapping[str, Any] = field(default_factory=dict)
    launch: Mapping[str, Any] | None = None
    telemetry: Mapping[str, Any] = field(default_factory=dict)
    slo: Mapping[str, Any] = field(default_factory=dict)  # the SLO probe's levels and stop reason
    evidence: Mapping[str, Any] | None = None
    signature: str | None = None
    error: str | None = None
    invalid_combination: str | None = None
    screened: str | None = None
    duplicate_of: int | None = None
    rescreen_of: int | None = None
    requeued_from: int | None = None
    partition: tuple[int, ...] = ()
    launched_at: float | None = None
    node: str | None = None
    host: Mapping[str, Any] | None = None  # what it ran on (tuner.host.fingerprint), where stored
    revalidated: Mapping[str, Any] | None = None
    confirmed: Mapping[str, Any] | None = None  # its long run at its SLO answer (tuner.orchestration.confirm), when any
    # the SLO figures the search stored, where a confirmation corrected them (``metrics`` and
    # ``values`` then hold the confirmed answer: :func:`corrected_metrics`)
    searched: Mapping[str, float] | None = None

    @classmethod
    def of(
        cls,
        trial: FrozenTrial,
        revalidated: Mapping[str, Any] | None = None,
        confirmed: Mapping[str, Any] | None = None,
        objectives: Sequence[str] = (),
    ) -> TrialRecord:
        """``objectives``: the metric behind each objective value, so that a corrected SLO answer
        replaces the value (and each re-run's) it stands for."""
        a = trial.user_attrs
        stored = a.get(k.METRICS) or {}
        metrics = corrected_metrics(stored, confirmed)
        values = tuple(trial.values) if trial.values is not None else None
        if metrics is not None:
            values, revalidated = _corrected_values(values, revalidated, metrics, objectives)
        return cls(
            number=trial.number,
            state=trial.state,
            params=dict(trial.params),
            values=values,
            constraints=named_constraints(trial.constraints),
            kind=_kind(a),
            datetime_start=trial.datetime_start,
            datetime_complete=trial.datetime_complete,
            metrics=metrics if metrics is not None else stored,
            capacity=a.get(k.CAPACITY) or {},
            timings=a.get(k.TIMINGS) or {},
            launch=a.get(k.LAUNCH) or None,
            telemetry=a.get(k.TELEMETRY) or {},
            slo=a.get(k.SLO) or {},
            evidence=a.get(k.EVIDENCE),
            signature=a.get(k.SIGNATURE),
            error=a.get(k.ERROR),
            invalid_combination=a.get(k.INVALID),
            screened=a.get(k.SCREENED) or None,
            duplicate_of=a.get(k.DUPLICATE_OF),
            rescreen_of=a.get(k.RESCREEN_OF),
            requeued_from=a.get(k.REQUEUED_FROM),
            partition=tuple(a.get(k.PARTITION) or ()),
            launched_at=a.get(k.LAUNCHED_AT),
            node=a.get(k.NODE),
            host=a.get(k.HOST),
            revalidated=revalidated,
            confirmed=confirmed,
            searched=stored if metrics is not None else None,
        )

    @property
    def launched(self) -> bool:
        """A server was (or was to be) started for it: not an invalid combination, a screened
        config or a copy."""
        return self.kind == Kind.LAUNCHED

    @property
    def finished(self) -> bool:
        """Launched and ended as a result (COMPLETE or PRUNED): what counts toward a budget."""
        return self.launched and self.state in (TrialState.COMPLETE, TrialState.PRUNED)

    @property
    def feasible(self) -> bool:
        """Optuna's convention: every constraint value <= 0 (a trial without any is feasible)."""
        return all(v <= 0 for v in self.constraints.values())

    @property
    def source(self) -> int:
        """The trial whose server measured this one's result (a copy's original)."""
        return self.duplicate_of if self.duplicate_of is not None else self.number

    @property
    def details(self) -> Mapping[str, Any]:
        """The evidence's numbers (a failure's, or a screened config's prediction)."""
        return (self.evidence or {}).get("details") or {}

    @property
    def skipped_on(self) -> int | None:
        """The trial whose evidence a screened config was skipped on (None: not screened, or a
        rule without one)."""
        return self.details.get("from_trial") if self.screened else None

    @property
    def kv_tokens(self) -> float | None:
        """The KV pool the engine reported, for a trial that started."""
        return self.capacity.get("kv_tokens") if self.state == TrialState.COMPLETE else None

    @property
    def launched_when(self) -> datetime | None:
        """When the trial got its partition and its server was started (Optuna's ``datetime_start``
        is when it was asked: a trial may wait for its GPUs), else its timings' start."""
        stamp = self.launched_at or self.timings.get("started_at")
        return datetime.fromtimestamp(stamp) if stamp else None

    @property
    def duration(self) -> timedelta | None:
        if self.datetime_start is None or self.datetime_complete is None:
            return None
        return self.datetime_complete - self.datetime_start

    @property
    def note(self) -> str:
        """Why it is not a plain result, in a few words: a copy, a failure's signature, a broken
        constraint, an error."""
        if self.duplicate_of is not None:
            return f"copy of {self.duplicate_of}"
        return self.signature or self.invalid_combination or self.error or ""


@dataclass(frozen=True)
class StudyRecord:
    """A study's own attrs (space, objectives, noise, re-measurements, lease) and its trials."""

    name: str
    directions: tuple[str, ...]
    metric_names: tuple[str, ...] | None
    space: Mapping[str, Any] | None
    space_file: str | None
    fingerprint: str | None
    objectives: Mapping[str, Any] | None
    noise: Mapping[str, Any]
    revalidated: Mapping[int, Mapping[str, Any]]
    lease: Mapping[str, Any] | None
    trials: tuple[TrialRecord, ...] = ()
    confirmed: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    noise_prior: Mapping[str, Any] | None = None  # the engine's fresh-server spread here (tuner.results.noise)
    # the trials as Optuna froze them, for Optuna's own analyses (parameter importance) of this
    # one read: an in-memory study built from them reads no storage
    frozen: tuple[optuna.trial.FrozenTrial, ...] = field(default=(), repr=False, compare=False)

    def trial(self, number: int) -> TrialRecord | None:
        return next((t for t in self.trials if t.number == number), None)

    def with_state(self, *states: TrialState) -> list[TrialRecord]:
        return [t for t in self.trials if t.state in states]


def corrected_metrics(metrics: Mapping[str, float], confirmed: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The trial's metrics with the SLO answer its confirmation found to hold below the search's
    (a run at the answer broke, a step down held throughout: tuner.orchestration.confirm): the answer, its
    goodput and CI, the lowest load that broke above it, and the figures measured at the answer
    (latencies, delivery, completions, how long it held) from the run that held there: the search's
    were of a load that is no longer the answer. None where nothing was corrected."""
    kept = (confirmed or {}).get("confirmed_answer")
    if not kept or dict(kept) == dict((confirmed or {}).get("answer") or {}):
        return None
    assert confirmed is not None
    rate = "rate" in kept
    answer, violated = (SLO_RATE, SLO_RATE_VIOLATED) if rate else (SLO_CONCURRENCY, SLO_CONCURRENCY_VIOLATED)
    at = float(kept["rate" if rate else "concurrency"])
    figures = {f"slo.{name}": name for name in (*SLO_AT_LEVEL, *SLO_AT_RATE)}
    found = {key: value for key, value in metrics.items() if key not in figures and key != SLO_HELD_S}
    found[answer] = at
    held: Mapping[str, Any] = next((r for r in confirmed.get("runs") or () if r.get("held") and float(r.get("at", -1)) == at), {})
    found.update({key: float(held[name]) for key, name in figures.items() if isinstance(held.get(name), (int, float))})
    if held.get("seconds") is not None:
        found[SLO_HELD_S] = float(held["seconds"])
    if confirmed.get("confirmed_goodput") is not None:
        found[SLO_GOODPUT] = float(confirmed["confirmed_goodput"])
    found.pop(SLO_GOODPUT_CI, None), found.pop(SLO_GOODPUT_PER_GPU_CI, None)
    if confirmed.get("confirmed_ci") is not None:
        found[SLO_GOODPUT_CI] = float(confirmed["confirmed_ci"])
    found.update(_per_gpu(metrics, found))
    above = [float(r["at"]) for r in confirmed.get("runs") or () if not r.get("held") and float(r.get("at", 0)) > at]
    if above:
        found[violated] = min([*above, metrics.get(violated, float("inf"))])
    return found


def _per_gpu(searched: Mapping[str, float], found: Mapping[str, float]) -> dict[str, float]:
    """The corrected goodput (and its CI) per GPU, over the GPUs the search divided by
    (tuner.probes.load.per_gpu): the search's per-GPU figure was of the load that broke. Nothing
    where the search stored none."""
    goodput, per = searched.get(SLO_GOODPUT), searched.get(SLO_GOODPUT_PER_GPU)
    if not goodput or not per or SLO_GOODPUT not in found:
        return {}
    gpus = max(1, round(goodput / per))
    fixed = {SLO_GOODPUT_PER_GPU: found[SLO_GOODPUT] / gpus}
    if SLO_GOODPUT_CI in found:
        fixed[SLO_GOODPUT_PER_GPU_CI] = found[SLO_GOODPUT_CI] / gpus
    return fixed


def _corrected_values(
    values: tuple[float, ...] | None,
    revalidated: Mapping[str, Any] | None,
    metrics: Mapping[str, float],
    objectives: Sequence[str],
) -> tuple[tuple[float, ...] | None, Mapping[str, Any] | None]:
    """The objective values (and each fresh-server run's) with the corrected SLO figures: the long
    run at the confirmed answer stands for the config, not the short windows of the search."""
    where = {
        j: metrics[name]
        for j, name in enumerate(objectives)
        if name in (SLO_GOODPUT, SLO_GOODPUT_PER_GPU, SLO_RATE, SLO_CONCURRENCY)
    }
    if not where:
        return values, revalidated

    def fixed(row: Sequence[float]) -> list[float]:
        return [where.get(j, v) for j, v in enumerate(row)]

    if values is not None and len(values) == len(objectives):
        values = tuple(fixed(values))
    if revalidated and revalidated.get("runs"):
        runs = [fixed(run) if len(run) == len(objectives) else list(run) for run in revalidated["runs"]]
        revalidated = {**revalidated, "runs": runs}
    return values, revalidated


def _objective_names(attrs: Mapping[str, Any], names: Sequence[str] | None) -> list[str]:
    """The metric behind each objective, as the study stored its objective set (else its metric names)."""
    stored = (attrs.get(k.OBJECTIVES) or {}).get("objectives") or []
    return [o.get("metric", "") for o in stored] or list(names or [])


def _per_trial(attrs: Mapping[str, Any], key: str) -> dict[int, Mapping[str, Any]]:
    """The study attrs ``<key>.<trial number>``, by trial number."""
    prefix = f"{key}."
    return {
        int(key[len(prefix) :]): value for key, value in attrs.items() if key.startswith(prefix) and key[len(prefix) :].isdigit()
    }


def read_study(study: optuna.Study, *, states: Sequence[TrialState] | None = None, trials: bool = True) -> StudyRecord:
    """The study's attrs and its trials (those in ``states``, default all; none without ``trials``), read once."""
    attrs = study.user_attrs
    revalidated = _per_trial(attrs, k.REVALIDATED)
    confirmed = _per_trial(attrs, k.CONFIRMED)
    frozen = study.get_trials(deepcopy=False, states=tuple(states) if states is not None else None) if trials else []
    lease = attrs.get(k.LEASE)
    return StudyRecord(
        name=study.study_name,
        directions=tuple(d.name.lower() for d in study.directions),
        metric_names=tuple(study.metric_names) if study.metric_names else None,
        space=attrs.get(k.SPACE),
        space_file=attrs.get(k.SPACE_FILE),
        fingerprint=attrs.get(k.FINGERPRINT),
        objectives=attrs.get(k.OBJECTIVES) or None,
        noise=attrs.get(k.NOISE) or {},
        revalidated=revalidated,
        lease=lease if isinstance(lease, dict) and lease else None,
        trials=tuple(
            TrialRecord.of(t, revalidated.get(t.number), confirmed.get(t.number), _objective_names(attrs, study.metric_names))
            for t in frozen
        ),
        confirmed=confirmed,
        noise_prior=attrs.get(k.NOISE_PRIOR) or None,
        frozen=tuple(frozen),
    )


Studied = optuna.Study | StudyRecord  # a live study, or the record a command read once


def record_of(study: Studied, *, trials: bool = True) -> StudyRecord:
    """The record as it is, or the live study read once (its attrs, and every trial unless
    ``trials`` is False). A command reads once and hands the record on; what reads a record
    then never touches storage."""
    return study if isinstance(study, StudyRecord) else read_study(study, trials=trials)


def read_trials(study: optuna.Study, *, states: Sequence[TrialState] | None = None) -> list[TrialRecord]:
    """The study's trials as records (those in ``states``, default all)."""
    return list(read_study(study, states=states).trials)


def read_lease(study: optuna.Study) -> Mapping[str, Any] | None:
    """The run lease stored on the study (None when none is held or it was cleared)."""
    data = study.user_attrs.get(k.LEASE)
    return data if isinstance(data, dict) and data else None
