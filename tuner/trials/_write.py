"""The one writer of what a study stores: a trial's verdict (its state, values, constraints and
attrs, through :func:`tell`, the only caller of ``study.tell``), and every other attribute a trial
or the study carries (where it ran, why it was queued, the space, the noise, re-measurements, the
run lease).

Where a failure becomes a state: :data:`STATES`, one table, read by :func:`state_for`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.base.artifacts import EVIDENCE_FILES, RunDir
from tuner.base.evidence import DISTANCE
from tuner.base.exceptions import ConfigInfeasible, InfrastructureError, InvalidCombination
from tuner.base.metrics import (
    CAPACITY_CONTEXT_PER_REQUEST,
    CAPACITY_KV_TOKENS,
    LOAD_ERROR_RATE,
    LOAD_OUTPUT_TOK_S,
    LOAD_OUTPUT_TOK_S_CI,
    LOAD_TTFT_P99,
    RECALL_EFFECTIVE_CONTEXT,
    SERVED_CONTEXT,
    TELEMETRY_TOKENS_PER_JOULE,
)
from tuner.base.records import TrialOutcome
from tuner.trials import _keys as k
from tuner.trials._record import TrialRecord

__all__ = [
    "HEADLINES",
    "STARTS",
    "STATES",
    "Verdict",
    "enqueue",
    "grade",
    "headline_metrics",
    "keep_evidence",
    "mark_launched",
    "requeue",
    "running_trial",
    "save_confirmation",
    "save_noise",
    "save_noise_prior",
    "save_revalidation",
    "state_for",
    "store_setup",
    "tell",
    "write_lease",
]

logger = logging.getLogger(__name__)

STARTS = "server starts"  # the constraint every launched trial carries: 0 started, > 0 how far from feasible

# An exception -> the trial's state, first match wins. A config that cannot start or serve, or
# that breaks the space's constraints, is data for the sampler (PRUNED: TPE learns from it); a
# fault of the machinery or of the probes is FAIL (ignored by the sampler, the config retried).
STATES: tuple[tuple[type[BaseException], TrialState], ...] = (
    (ConfigInfeasible, TrialState.PRUNED),
    (InvalidCombination, TrialState.PRUNED),
    (BaseException, TrialState.FAIL),
)


def state_for(error: BaseException | None) -> TrialState:
    """A trial's state: COMPLETE without an error, else the first row of :data:`STATES` it matches."""
    if error is None:
        return TrialState.COMPLETE
    return next(state for kind, state in STATES if isinstance(error, kind))


def grade(details: Mapping[str, Any]) -> float:
    """How far a failed start was from feasible, as a constraint violation (> 0): the ratio of
    what was asked to what the engine says would fit, minus one (the adapter's signature reads it
    from the engine's words: ``DISTANCE``); 1.0 when the engine gave no numbers. A raised
    exception's numbers (``asked``/``viable``, direction unknown) grade by their distance."""
    if details.get(DISTANCE) is not None:
        return max(float(details[DISTANCE]), 1e-6)
    if details.get("asked") and details.get("viable"):
        ratio = float(details["asked"]) / float(details["viable"])
        return max(max(ratio, 1.0 / ratio) - 1.0, 1e-6)
    return 1.0


def describe(error: BaseException) -> str:
    evidence = getattr(error, "evidence", None)
    if evidence is not None:
        return str(evidence.describe())
    return f"{type(error).__name__}: {error}"


@dataclass(frozen=True)
class Verdict:
    """How a trial ended, as :func:`tell` records it: its state, its objective values (COMPLETE
    only), its constraint values (> 0 violated) and what to keep on it. Built by the class
    methods below: each chooses the state through :func:`state_for` (a copy keeps its original's)."""

    state: TrialState
    values: tuple[float, ...] | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        outcome: TrialOutcome | None = None,
        error: BaseException | None = None,
        *,
        values: Sequence[float] | None = None,
        constraints: Mapping[str, float] | None = None,
        screened: str | None = None,
    ) -> Verdict:
        """A launched (or screened) trial's verdict: what its worker measured (``outcome``, with the
        objective set's ``values`` and ``constraints``), or the error it ended with."""
        state = state_for(error)
        attrs: dict[str, Any] = {}
        if outcome is not None:
            attrs[k.METRICS] = outcome.metrics()
            if (sampled := next((r for r in outcome.probes if r.probe == "telemetry"), None)) is not None:
                attrs[k.TELEMETRY] = {key: sampled.details.get(key) for key in ("source", "trace", "windows")}
            if (slo := next((r for r in outcome.probes if r.probe == "slo"), None)) is not None:
                attrs[k.SLO] = slo.details
            attrs[k.CAPACITY] = outcome.capacity.to_dict()
            attrs[k.TIMINGS] = outcome.timings.__dict__
            attrs[k.LAUNCH] = outcome.launch()
            if outcome.node:
                attrs[k.NODE] = outcome.node
            if outcome.host:
                attrs[k.HOST] = outcome.host
        if screened:
            attrs[k.SCREENED] = screened
        if error is None:
            return cls(state, tuple(values or ()), {**(constraints or {}), STARTS: 0.0}, attrs)
        attrs[k.ERROR] = describe(error)
        evidence = getattr(error, "evidence", None)
        if evidence is not None:
            attrs[k.SIGNATURE] = evidence.signature
            attrs[k.EVIDENCE] = evidence.to_dict()
        starts = {STARTS: grade(evidence.details if evidence is not None else {})} if state == TrialState.PRUNED else {}
        return cls(state, None, starts, attrs)

    @classmethod
    def invalid(cls, reason: str, violations: Mapping[str, float]) -> Verdict:
        """Params that break the space's constraints (never launched); ``violations`` by constraint."""
        return cls(state_for(InvalidCombination(reason)), None, dict(violations), {k.INVALID: reason})

    @classmethod
    def stopped(cls, why: str) -> Verdict:
        """A trial the tuner stopped, or asked and never launched (the machinery's, not the config's)."""
        return cls(state_for(InfrastructureError(why)), None, {}, {k.ERROR: why})

    @classmethod
    def copy_of(cls, original: TrialRecord) -> Verdict:
        """A repeat of a config the study launched already: the original's state, values,
        constraints, result and launch record."""
        complete = original.state == TrialState.COMPLETE
        carried = {
            k.METRICS: original.metrics,
            k.CAPACITY: original.capacity,
            k.SIGNATURE: original.signature,
            k.EVIDENCE: original.evidence,
            k.LAUNCH: original.launch,
        }
        attrs = {key: value for key, value in carried.items() if value}
        return cls(
            original.state,
            original.values if complete else None,
            dict(original.constraints),
            {k.DUPLICATE_OF: original.number, **attrs},
        )


HEADLINES = (
    LOAD_OUTPUT_TOK_S,
    LOAD_OUTPUT_TOK_S_CI,
    LOAD_TTFT_P99,
    LOAD_ERROR_RATE,
    RECALL_EFFECTIVE_CONTEXT,
    SERVED_CONTEXT,
    CAPACITY_CONTEXT_PER_REQUEST,
    CAPACITY_KV_TOKENS,
    TELEMETRY_TOKENS_PER_JOULE,
)


def headline_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics a trials table sorts by, as flat scalars (optuna-dashboard cannot sort the nested ``metrics``)."""
    return {name: float(metrics[name]) for name in HEADLINES if name in metrics}


def _trial_id(trial: optuna.Trial) -> int:
    """The storage's id of a live trial, through the storage's public methods."""
    storage = trial.storage
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(trial.study.study_name), trial.number)


def tell(study: optuna.Study, trial: optuna.Trial, verdict: Verdict, *, run_dir: RunDir | None = None) -> None:
    """The one place a trial gets its state: attrs and constraints first, then ``study.tell``.

    Constraints are stored twice: by name (Optuna 5's ``constraints:<name>``, what
    :class:`~tuner.trials.TrialRecord` reads) and as the plain list under ``constraints`` (what
    Optuna's constrained samplers write and optuna-dashboard 0.21 reads for feasibility).
    Headline metrics are also flat scalar attrs, so the dashboard can show and sort them."""
    for key, value in verdict.attrs.items():
        trial.set_user_attr(key, value)
    for name, value in headline_metrics(verdict.attrs.get(k.METRICS, {})).items():
        trial.set_user_attr(name, value)
    for name, value in verdict.constraints.items():
        trial.set_constraint(name, value)
    if verdict.constraints:
        trial.storage.set_trial_system_attr(_trial_id(trial), "constraints", [float(v) for v in verdict.constraints.values()])
    if run_dir is not None:
        keep_evidence(trial, run_dir)
    if verdict.state == TrialState.COMPLETE:
        study.tell(trial, list(verdict.values or ()))
    else:
        study.tell(trial, state=verdict.state)


def keep_evidence(trial: optuna.Trial, run_dir: RunDir) -> None:
    """The trial's files (command, server log, evidence, outcome) into the study's artifact store,
    attached to the trial while it can still take them (Optuna refuses a finished trial's): every
    driver and optuna-dashboard read them there, whichever folder or node the trial ran from."""
    from optuna.artifacts import upload_artifact

    folder = run_dir.trial(trial.number)
    files = [folder / name for name in EVIDENCE_FILES if (folder / name).is_file()]
    if not files:
        return
    try:
        store = run_dir.artifact_store()
        for path in files:
            upload_artifact(artifact_store=store, file_path=str(path), study_or_trial=trial)
    except Exception as exc:  # noqa: BLE001 - a full or unreachable store must never cost the verdict: the local copy stays
        logger.warning("trial %d: evidence not copied to the artifact store %s: %s", trial.number, run_dir.artifacts, exc)


def running_trial(study: optuna.Study, frozen: FrozenTrial) -> optuna.Trial:
    """A live handle on a trial another (dead) driver left RUNNING, so it can be told.

    Optuna has no public way to re-attach to a stored trial: this reads ``FrozenTrial._trial_id``
    (as Optuna's own ``fail_stale_trials`` does), the one private name tuner uses;
    tests/trials/test_write.py pins it."""
    return optuna.Trial(study, frozen._trial_id)


def mark_launched(trial: optuna.Trial, devices: Sequence[int]) -> None:
    """The trial got its partition and its server is being started (asked is not launched: a
    trial may wait for its GPUs; :attr:`TrialRecord.launched_when`)."""
    trial.set_user_attr(k.PARTITION, list(devices))
    trial.set_user_attr(k.LAUNCHED_AT, time.time())


def enqueue(
    study: optuna.Study,
    params: Mapping[str, Any],
    *,
    from_space: bool = False,
    requeued_from: int | None = None,
    rescreen_of: int | None = None,
) -> None:
    """Queue ``params`` as the next trial, saying why: the space's own config (a baseline, a grid
    point), a config an interrupted trial did not finish, or one the screen skipped on evidence
    that a later start contradicted."""
    attrs: dict[str, Any] = {}
    if from_space:
        attrs[k.ENQUEUED] = "space"
    if requeued_from is not None:
        attrs[k.REQUEUED_FROM] = requeued_from
    if rescreen_of is not None:
        attrs[k.RESCREEN_OF] = rescreen_of
    study.enqueue_trial(dict(params), user_attrs=attrs)


def requeue(study: optuna.Study, trial: optuna.Trial | FrozenTrial) -> bool:
    """Queue an interrupted trial's params again (once: a re-queued trial interrupted in turn is
    not), so the next run measures the config instead of losing it; an enqueued config (a grid
    point, a baseline) has no other way back. Returns whether it was queued."""
    if k.REQUEUED_FROM in trial.user_attrs or not trial.params:
        return False
    enqueue(study, trial.params, requeued_from=trial.number)
    return True


def store_setup(
    study: optuna.Study, *, fingerprint: str, space: Mapping[str, Any], source: str, objectives: Mapping[str, Any]
) -> None:
    """The space (validated, as JSON), its digest and file, and the objective set a study runs with."""
    study.set_user_attr(k.FINGERPRINT, fingerprint)
    study.set_user_attr(k.SPACE, dict(space))
    study.set_user_attr(k.SPACE_FILE, source)
    study.set_user_attr(k.OBJECTIVES, dict(objectives))


def save_noise(study: optuna.Study, noise: Mapping[str, Any]) -> None:
    """The reference config's runs (``reference``, ``runs``, ``labels``, ``failures``, ``drift``)."""
    study.set_user_attr(k.NOISE, dict(noise))


def save_noise_prior(study: optuna.Study, prior: Mapping[str, Any]) -> None:
    """The engine's fresh-server spread on the study's hardware (``relative_sd``, ``dof``, ``source``)."""
    study.set_user_attr(k.NOISE_PRIOR, dict(prior))


def save_revalidation(study: optuna.Study, number: int, data: Mapping[str, Any]) -> None:
    """Trial ``number``'s runs on fresh servers (Optuna forbids changing a finished trial: kept on the study)."""
    study.set_user_attr(f"{k.REVALIDATED}.{number}", dict(data))


def save_confirmation(study: optuna.Study, number: int, data: Mapping[str, Any]) -> None:
    """Trial ``number``'s long run at its SLO answer on a fresh server (tuner.orchestration.confirm)."""
    study.set_user_attr(f"{k.CONFIRMED}.{number}", dict(data))


def write_lease(study: optuna.Study, holder: Mapping[str, Any]) -> None:
    """The run lease (``{}`` clears it)."""
    study.set_user_attr(k.LEASE, dict(holder))
