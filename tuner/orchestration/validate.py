"""Re-measurement on fresh servers: the study's noise floor and its front candidates.

A config picked as best on one measurement often degrades once redeployed (TUNA found 63 % of
such picks lost >= 30 %; on the H200 a winner measured 6,300 tok/s in the tune and 3,475 / 4,146
on two fresh servers). So:

- at the start of `tune run`, the *reference* config (the space's first enqueued config) is run
  on fresh servers: with its own trial, that gives the between-server spread (the noise floor);
- at the end, the front candidates and the reference are re-run, interleaved round by round
  (every item once, then every item again), so that drift of the host hits all of them alike;
  the reference's start and end runs tell whether the host drifted.

Runs are stored in the study's user attributes (Optuna forbids changing finished trials):
``revalidated.<trial>`` = {values (mean), runs (the trial's own first, then the re-runs),
failures}; ``noise`` = {reference, runs, labels, drift}. Picks use them (:mod:`tuner.results.pick`).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.base.artifacts import RunDir
from tuner.base.exceptions import ConfigError, TunerError, describe_failure
from tuner.base.metrics import LOAD_OUTPUT_TOK_S, SLO_CONCURRENCY, SLO_GOODPUT
from tuner.base.records import TrialOutcome
from tuner.host.ledger import Ledger
from tuner.launching.executors import Executor
from tuner.launching.scheduler import Scheduler
from tuner.objectives import ObjectiveSet
from tuner.results.noise import differs, is_noisy, kept, probe_cis
from tuner.results.pick import Candidate, candidates, objective_metrics, pareto_front, pick, reference_groups, signs, study_floor
from tuner.space import SearchSpace
from tuner.trials import Studied, TrialRecord, read_study, read_trials, record_of, save_noise, save_revalidation

__all__ = ["Revalidation", "measure_reference", "reference_params", "remeasure", "revalidate", "top_candidates"]

logger = logging.getLogger(__name__)
REFERENCE = "reference"


@dataclass(frozen=True)
class Revalidation:
    trial: int
    original: tuple[float, ...]
    runs: tuple[tuple[float, ...], ...]  # the re-runs only
    failures: tuple[str, ...]
    metrics: tuple[dict[str, float], ...] = ()  # the re-runs' RUN_METRICS, aligned with ``runs``

    @property
    def all_runs(self) -> tuple[tuple[float, ...], ...]:
        return (self.original, *self.runs)

    @property
    def mean(self) -> tuple[float, ...]:
        """Over the runs the pick counts: a disturbed one (:func:`~tuner.results.noise.set_aside`) left out,
        so the revalidation and the pick state one number."""
        return tuple(statistics.fmean(col) for col in zip(*kept(self.all_runs), strict=True))

    @property
    def spread(self) -> tuple[float, ...] | None:
        """(max - min) / mean per objective over all runs; None from a single run."""
        if len(self.all_runs) < 2:
            return None
        cols = list(zip(*self.all_runs, strict=True))
        return tuple((max(c) - min(c)) / statistics.fmean(c) if statistics.fmean(c) else 0.0 for c in cols)

    @property
    def change(self) -> tuple[float, ...]:
        """The mean (a disturbed run left out) relative to the first measurement, per objective."""
        return tuple((m - o) / o if o else 0.0 for m, o in zip(self.mean, self.original, strict=True))

    def to_dict(self) -> dict[str, Any]:
        return {
            "values": list(self.mean),
            "runs": [list(r) for r in self.all_runs],
            "failures": list(self.failures),
            "metrics": [dict(m) for m in self.metrics],
        }


@dataclass
class _Item:
    label: str
    params: dict[str, Any]
    values: list[tuple[float, ...]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    metrics: list[dict[str, float]] = field(default_factory=list)  # RUN_METRICS of each run in ``values``
    within: list[dict[int, float]] = field(default_factory=list)  # each run's probe CI per objective index, where given


# what a re-run keeps beside its objective values: the figures tuner.results.gain compares pick and baseline on
RUN_METRICS = (SLO_GOODPUT, SLO_CONCURRENCY, LOAD_OUTPUT_TOK_S)


def run_metrics(metrics: Mapping[str, float]) -> dict[str, float]:
    return {m: float(metrics[m]) for m in RUN_METRICS if m in metrics}


def remeasure(
    space: SearchSpace,
    objective: ObjectiveSet,
    run_dir: RunDir,
    runner: Executor | Scheduler,
    items: list[tuple[str, dict[str, Any]]],
    *,
    repeats: int,
    ledger: Ledger | None = None,
    on_run: Callable[[str, int, str], None] | None = None,
) -> dict[str, _Item]:
    """Run each item ``repeats`` times on fresh servers, round by round, partitions in parallel.

    Through the search's :class:`~tuner.launching.scheduler.Scheduler` (``runner``; an executor gets one of
    its own): the same GPU hygiene, per-trial time limit and stop. A stop requested meanwhile
    stops the runs in flight and records them as failures."""
    scheduler = (
        runner
        if isinstance(runner, Scheduler)
        else Scheduler(space, runner, ledger or Ledger(run_dir.root / "servers"), time_limit=space.budget.trial_timeout)
    )
    state = {label: _Item(label, params) for label, params in items}
    queue = [(label, r) for r in range(repeats) for label, _ in items]
    folder = run_dir.root / "validate"
    while (queue or scheduler.running) and not scheduler.stop_reason:
        while queue and len(scheduler.running) < scheduler.max_parallel:
            label, r = queue[0]
            where = folder / f"{label}-{len(list(folder.glob(f'{label}-*')))}"
            if scheduler.launch((label, r), state[label].params, where) is None:
                break
            queue.pop(0)
        if not scheduler.running:  # nothing could start: every partition of the size was refused
            for label, _ in queue:
                state[label].failures.append("not launched: " + "; ".join(scheduler.refusals))
            break
        for future, job in scheduler.wait(timeout=0.5):
            label, r = job.key
            text = _record(state[label], future, objective, scheduler.time_limit if job.timed_out else None)
            if on_run:
                on_run(label, r, text)
    if scheduler.stop_reason:
        for job in scheduler.stop().values():
            label, r = job.key
            state[label].failures.append(f"stopped: {scheduler.stop_reason}")
            if on_run:
                on_run(label, r, f"stopped: {scheduler.stop_reason}")
    return state


def _record(item: _Item, future: Future[TrialOutcome], objective: ObjectiveSet, outran: float | None = None) -> str:
    """A run's values into ``item`` (or its failure); ``outran``: the time limit it passed."""
    if outran is not None:
        text = f"outran its {outran:.0f}s limit: stopped"
        item.failures.append(text)
        return f"failed: {text}"
    try:
        outcome = future.result()
        values = objective.evaluate(outcome).values
    except (TunerError, KeyError) as exc:
        text = describe_failure(exc)
        item.failures.append(text)
        return f"failed: {text}"
    item.values.append(values)
    metrics = outcome.metrics()
    item.metrics.append(run_metrics(metrics))
    item.within.append(probe_cis(metrics, objective.metric_names))
    return " ".join(f"{name} {v:,.1f}" for name, v in zip(objective.metric_names, values, strict=True))


def reference_params(study: Studied, space: SearchSpace) -> dict[str, Any] | None:
    """The study's reference config: stored with its noise, else the space's first enqueued config."""
    stored = record_of(study, trials=False).noise.get(REFERENCE)
    if stored is not None:
        return dict(stored)
    return dict(space.enqueue[0]) if space.enqueue else None


def _reference_trial(study: optuna.Study, params: dict[str, Any]) -> list[TrialRecord]:
    return [t for t in read_trials(study, states=(TrialState.COMPLETE,)) if t.params == params and t.duplicate_of is None][:1]


def store_reference(study: optuna.Study, params: dict[str, Any], item: _Item, when: str) -> dict[str, Any]:
    """Append the reference's runs (its own trial's first) and re-check drift: start vs end."""
    noise = dict(read_study(study, trials=False).noise or {REFERENCE: params, "runs": [], "labels": []})
    if "trial" not in noise["labels"]:  # the reference's own trial runs after the start measurement
        own = _reference_trial(study, params)
        noise["runs"], noise["labels"] = (
            [list(t.values or ()) for t in own] + noise["runs"],
            ["trial"] * len(own) + noise["labels"],
        )
        noise["metrics"] = [run_metrics(t.metrics) for t in own] + list(noise.get("metrics", []))
    noise["runs"] = noise["runs"] + [list(v) for v in item.values]
    noise["labels"] = noise["labels"] + [when] * len(item.values)
    noise["metrics"] = list(noise.get("metrics", [])) + item.metrics
    noise["failures"] = noise.get("failures", []) + item.failures
    noise["drift"] = _drift(study, noise)
    save_noise(study, noise)
    return noise


def _drift(study: optuna.Study, noise: dict[str, Any]) -> float | None:
    """Relative change of the reference's throughput from the start of the run to its end, when
    that change is larger than the noise; None when there is none to speak of (or no end yet)."""
    start = [r[0] for r, lab in zip(noise["runs"], noise["labels"], strict=True) if lab in ("trial", "start")]
    later = [lab for lab in noise["labels"] if lab == "end" or lab.startswith("after")]
    last = later[-1] if later else None  # drift up to the latest re-measurement: the end, else the last pause
    end = [r[0] for r, lab in zip(noise["runs"], noise["labels"], strict=True) if lab == last]
    if not start or not end:
        return None
    names = objective_metrics(study)
    floor = study_floor(study, [is_noisy(m) for m in names], reference=reference_groups(noise))
    a, b = statistics.fmean(start), statistics.fmean(end)
    hw = 1.96 * floor.relative_sd[0] * a if floor.known else 0.0
    return (b - a) / a if a and differs(a, hw / len(start) ** 0.5, b, hw / len(end) ** 0.5) else None


def measure_reference(
    study: optuna.Study,
    space: SearchSpace,
    objective: ObjectiveSet,
    run_dir: RunDir,
    executor: Executor | Scheduler,
    *,
    runs: int,
    ledger: Ledger | None = None,
    on_run: Callable[[str, int, str], None] | None = None,
    when: str = "start",
) -> dict[str, Any] | None:
    """The noise floor: the reference config on ``runs`` fresh servers, at the start of a run
    (``when`` "start") or while it runs ("after<n>": after n trials; drift is checked against the start)."""
    params = reference_params(study, space)
    if params is None or runs < 1:
        return None
    state = remeasure(space, objective, run_dir, executor, [(REFERENCE, params)], repeats=runs, ledger=ledger, on_run=on_run)
    return store_reference(study, params, state[REFERENCE], when)


def top_candidates(study: Studied, top: int) -> list[Candidate]:
    """The pick (the front's knee) first, then the rest of the noise-aware Pareto front (best first
    objective first), then the others: the config every command names is always among those
    re-measured (a README run once re-measured three others and picked a fourth on one run)."""
    record = record_of(study)
    direction = signs(record)
    items = candidates(record)
    front = pareto_front(items, direction)
    rest = [c for c in items if c not in front]
    knee = pick(record, "knee").number if items else None

    def key(c: Candidate) -> tuple[bool, float]:
        return c.number != knee, -direction[0] * c.values[0]

    return (sorted(front, key=key) + sorted(rest, key=key))[:top]


def revalidate(
    study: optuna.Study,
    space: SearchSpace,
    objective: ObjectiveSet,
    run_dir: RunDir,
    executor: Executor | Scheduler,
    *,
    top: int,
    repeats: int,
    ledger: Ledger | None = None,
    with_reference: bool = True,
    on_run: Callable[[str, int, str], None] | None = None,
    numbers: Sequence[int] | None = None,
) -> list[Revalidation]:
    """Re-run the top candidates (or the trials ``numbers``), and the reference for drift,
    ``repeats`` times, interleaved."""
    record = record_of(study)  # read once; what follows writes through tuner.trials
    chosen = top_candidates(record, top) if numbers is None else [c for c in candidates(record) if c.number in numbers]
    items = [(f"trial{c.number}", dict(c.trial.params)) for c in chosen]
    reference = reference_params(record, space) if with_reference else None
    if reference is not None:
        items.append((REFERENCE, reference))
    state = remeasure(space, objective, run_dir, executor, items, repeats=repeats, ledger=ledger, on_run=on_run)
    results = []
    for cand in chosen:
        item = state[f"trial{cand.number}"]
        previous = cand.trial.revalidated or {}
        earlier = [tuple(r) for r in previous.get("runs", [])[1:]]
        earlier_metrics = list(previous.get("metrics", [])) if len(previous.get("metrics", [])) == len(earlier) else []
        result = Revalidation(
            cand.number,
            tuple(cand.trial.values or ()),
            (*earlier, *item.values),
            tuple(item.failures),
            tuple([*earlier_metrics, *item.metrics]) if earlier_metrics or not earlier else (),
        )
        save_revalidation(study, cand.number, result.to_dict())
        results.append(result)
    if reference is not None:
        store_reference(study, reference, state[REFERENCE], "end")
    return results


def race(
    study: optuna.Study,
    space: SearchSpace,
    objective: ObjectiveSet,
    run_dir: RunDir,
    executor: Executor | Scheduler,
    *,
    budget: int,
    how: str = "knee",
    ledger: Ledger | None = None,
    on_run: Callable[[str, int, str], None] | None = None,
) -> int:
    """Break the pick's ties: round by round, the pick and the configs it ties with run once more
    each on fresh servers (interleaved), until the pick stands alone or ``budget`` launches are
    spent. Configs that fall out of the tie get no more runs, so the budget goes where the
    decision is. Returns the launches used."""
    used = 0
    while True:
        try:
            chosen = pick(study, how)
        except ConfigError:
            return used
        tied = [chosen.number, *chosen.ties]
        if len(tied) < 2 or used + len(tied) > budget or (isinstance(executor, Scheduler) and executor.stop_reason):
            return used
        revalidate(
            study,
            space,
            objective,
            run_dir,
            executor,
            top=len(tied),
            repeats=1,
            ledger=ledger,
            with_reference=False,
            on_run=on_run,
            numbers=tied,
        )
        used += len(tied)
