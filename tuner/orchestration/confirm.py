"""A long confirmation of the pick: short probes to search, one long run to confirm.

The pick's SLO answer (N clients, or R requests/s open loop) came from windows of seconds on the
server of its own trial. Here the pick runs once more, on a fresh server, at that answer for a
long time (default 10 minutes: MLPerf LoadGen's minimum run length), through the same scheduler
as every other run (GPU hygiene, a time limit, a stop that ends it). What it found
(:class:`Confirmation`: held throughout or not, p99s per minute, drift, the goodput with its CI
beside the short probe's) is stored with the trial (``confirmed.<n>``); status, pareto, report
and export mark a confirmed pick, and export says when it exports one that is not.

A run that does not hold steps the load down (10 % a step) until one holds for the whole length,
within ``steps`` and the time left (:mod:`tuner.probes.long_run`): the load that held is the
confirmed answer, stored beside the search's, and the study's reader shows the trial at it
(:func:`tuner.trials.read_study`); an answer that did not hold and found none below stays the
search's, marked, and export refuses it unless forced.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna

from tuner import engines
from tuner.base.artifacts import RunDir
from tuner.base.exceptions import ConfigError, TunerError, describe_failure
from tuner.base.level import Level
from tuner.base.metrics import SLO_GOODPUT, SLO_GOODPUT_CI
from tuner.base.records import TrialOutcome
from tuner.host.fingerprint import HOST_FILE
from tuner.host.ledger import Ledger
from tuner.launching.executors import Executor
from tuner.launching.scheduler import Scheduler
from tuner.probes.load import request_body
from tuner.probes.long_run import AFTER_RUN_S, PARTIAL_FILE, RUNS_FILE, step_below
from tuner.results.confirmation import describe_answer, kv_pool
from tuner.results.pick import Candidate
from tuner.space import ConfirmProbeSpec, LoadProbeSpec, ProbesSpec, SearchSpace
from tuner.trials import TrialRecord, save_confirmation

__all__ = [
    "DEFAULT_SECONDS",
    "MARGIN_S",
    "STOP_S",
    "Confirmation",
    "answer_of",
    "confirm",
    "confirmation_space",
    "time_needed",
]

logger = logging.getLogger(__name__)

DEFAULT_SECONDS = 600.0  # MLPerf LoadGen's minimum run length
STEPS = 3  # a confirmation that does not hold steps down at most this often (10 % each)
MARGIN_S = 120.0  # beyond the start and the run: prompts, warm-up, the stop
SLICE_S = 60.0  # the SLO is checked per minute of the run
# a fresh server's start, at least, against the one its trial measured: that start filled the engine's caches
# (vLLM's torch.compile, Python's bytecode), so later ones on the machine are faster (H100, 2026-12-07: vLLM 140 s
# at the search, 84-89 s after; SGLang 87 s, then 76)
START_LEAST = 0.5
STOP_S = 10.0  # after the probe's last run: the server's stop, the study's write


@dataclass(frozen=True)
class Confirmation:
    """The pick's long run: ``held`` when the whole run and every slice kept the SLO."""

    trial: int
    answer: Mapping[str, float]  # {"concurrency": N} or {"rate": R}
    seconds: float
    held: bool
    goodput: float
    goodput_ci: float | None
    short_goodput: float | None  # the SLO probe's, at the same answer
    short_ci: float | None
    drift: float
    broke: tuple[str, ...]
    slices: tuple[Level, ...] = ()  # the first run's, a minute each
    failure: str | None = None
    at: float = field(default_factory=time.time)
    runs: tuple[Mapping[str, Any], ...] = ()  # every run: the answer's, then each step down
    confirmed_answer: Mapping[str, float] | None = None  # the load that held throughout (None: none did)
    confirmed_goodput: float | None = None
    confirmed_ci: float | None = None
    cut_run: Mapping[str, Any] | None = None  # the run a cut ended, its figures so far (tuner.probes.long_run.run_so_far)
    host: Mapping[str, Any] | None = None  # what it ran on (tuner.host.fingerprint), where its worker wrote it
    # the most running requests the config decodes on CUDA graphs, where more may run (EngineAdapter.fast_path)
    fast_path: int | None = None
    # the KV pool its server had, in tokens and in requests of the load's one shape (kv_pool)
    kv_pool: Mapping[str, int] | None = None

    @property
    def corrected(self) -> bool:
        """A step below the search's answer held, and is the answer now."""
        return self.confirmed_answer is not None and dict(self.confirmed_answer) != dict(self.answer)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": dict(self.answer),
            "seconds": self.seconds,
            "held": self.held,
            "goodput": self.goodput,
            "goodput_ci": self.goodput_ci,
            "short_goodput": self.short_goodput,
            "short_ci": self.short_ci,
            "drift": self.drift,
            "broke": list(self.broke),
            "slices": [s.to_dict() for s in self.slices],
            "failure": self.failure,
            "at": self.at,
            "runs": [dict(r) for r in self.runs],
            "confirmed_answer": dict(self.confirmed_answer) if self.confirmed_answer is not None else None,
            "confirmed_goodput": self.confirmed_goodput,
            "confirmed_ci": self.confirmed_ci,
            "cut_run": dict(self.cut_run) if self.cut_run is not None else None,
            "host": dict(self.host) if self.host is not None else None,
            "fast_path": self.fast_path,
            "kv_pool": dict(self.kv_pool) if self.kv_pool is not None else None,
        }


def answer_of(space: SearchSpace, trial: TrialRecord) -> dict[str, float]:
    """The trial's SLO answer: {"concurrency": N} (closed loop) or {"rate": R} (open loop)."""
    slo = space.probes.slo
    if slo is None:
        raise ConfigError("confirm: the space has no SLO probe, so its pick has no answer (N clients or R/s) to confirm")
    key = "rate" if slo.mode == "rate" else "concurrency"
    value = trial.metrics.get(f"slo.{key}")
    if not value:
        raise ConfigError(f"confirm: trial {trial.number} held the SLO at no load (slo.{key} = {value}): nothing to confirm")
    return {key: float(value)}


def confirmation_space(
    space: SearchSpace,
    answer: Mapping[str, float],
    seconds: float,
    *,
    steps: int = STEPS,
    budget: float | None = None,
    until: float | None = None,
) -> SearchSpace:
    """``space`` with one probe: the long run at ``answer``, with the space's load workload and SLO,
    checked per minute (per third of a run shorter than three minutes), stepping down at most
    ``steps`` times within ``budget`` seconds where it does not hold, each run only where it ends
    before ``until`` (epoch seconds)."""
    slo, load = space.probes.slo, space.load_spec()
    assert slo is not None
    spec = ConfirmProbeSpec(
        concurrency=int(answer["concurrency"]) if "concurrency" in answer else None,
        rate=answer.get("rate"),
        duration=seconds,
        slice=min(SLICE_S, seconds / 3),  # a minute; a short run still gets three slices
        load=load if load is not None else LoadProbeSpec(),
        targets=slo.targets,
        steps=steps,
        budget=budget,
        until=until,
    )
    return space.model_copy(update={"probes": ProbesSpec(load=None, confirm=spec)})


def confirm(
    study: optuna.Study,
    space: SearchSpace,
    run_dir: RunDir,
    runner: Executor,
    chosen: Candidate,
    *,
    seconds: float = DEFAULT_SECONDS,
    ledger: Ledger | None = None,
    steps: int = STEPS,
    budget: float | None = None,
    resume: bool = False,
    until: float | None = None,
) -> Confirmation:
    """Run ``chosen`` (a pick) at its SLO answer on a fresh server for ``seconds``, stepping down
    where it does not hold (at most ``steps`` runs more, all of them within ``budget`` seconds
    of running, each ending before ``until``, epoch seconds); store and return it. ``resume``: go
    on from the stored confirmation instead, one step below its last run (which broke), keeping
    its runs (a confirmation cut by a deadline). Raises :class:`ConfigError`, storing nothing,
    where the server came up too late for any run to end before ``until``."""
    answer = answer_of(space, chosen.trial)
    before: tuple[Mapping[str, Any], ...] = ()
    start = answer
    if resume:
        answer, before, start = _resumed(space, chosen)
    derived = confirmation_space(space, start, seconds, steps=steps, budget=budget, until=until)
    limit = (budget or seconds * (steps + 1)) + space.server.startup_timeout + MARGIN_S
    scheduler = Scheduler(derived, runner, ledger or Ledger(run_dir.root / "servers"), time_limit=limit)
    folder = run_dir.root / "confirm"
    fast = engines.get(space.engine).fast_path(space.values(dict(chosen.trial.params)))  # its CUDA-graph cap, said with the runs
    where = folder / f"trial{chosen.number}-{len(list(folder.glob(f'trial{chosen.number}-*')))}"
    try:
        result = _run(scheduler, dict(chosen.trial.params), where)
    except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, SIGTERM (`timeout`): keep the runs that finished
        runs, failure = _runs(f"interrupted ({type(exc).__name__})", where)
        cut = _cut_run(where)
        if runs or before or (cut is not None and chosen.trial.confirmed is None):  # a bare cut replaces no earlier verdict
            found = _confirmation(chosen.trial, answer, seconds, (*before, *runs), failure, cut, host=_host(where), fast=fast)
            save_confirmation(study, chosen.number, found.to_dict())
        raise
    runs, failure = _runs(result, where)
    if not runs and (late := _not_started(result)):
        started = "" if isinstance(result, str) else f"its server started in {result.timings.startup_s:.0f} s; "
        raise ConfigError(f"confirm: {started}{late}: nothing ran, and the stored confirmation is as it was")
    cut = _cut_run(where) if failure else None
    found = _confirmation(chosen.trial, answer, seconds, (*before, *runs), failure, cut, host=_host(where), fast=fast)
    found = replace(found, kv_pool=kv_pool(space, chosen.trial, None if isinstance(result, str) else result))
    save_confirmation(study, chosen.number, found.to_dict())
    return found


def time_needed(space: SearchSpace, trial: TrialRecord, seconds: float) -> tuple[float, str]:
    """The least one run of ``seconds`` costs a command from its start, and how that was reckoned:
    the server's start as its trial measured it times :data:`START_LEAST` (none stored: 0), the
    run, :data:`~tuner.probes.long_run.AFTER_RUN_S` and :data:`STOP_S`. Less than that cannot
    end in a command's timeout, so such a run is refused before its server starts; more may not
    either, which the probe reckons once the server is up (``until``). On the H100 (2026-12-07)
    the rule before this, the trial's start x 1.25, refused a 7-minute vLLM run that would have
    taken 453 s of the 568 it had: its trial's start, 140 s, had been a cold one."""
    measured = float(trial.timings.get("startup_s") or 0.0)
    said = f"its server started in {measured:.0f} s at the search, x {START_LEAST:g}" if measured > 0 else "no start stored"
    around = AFTER_RUN_S + STOP_S
    return measured * START_LEAST + around + seconds, f"{said}; {seconds:.0f} s of load; {around:.0f} s around it"


def _resumed(space: SearchSpace, chosen: Candidate) -> tuple[dict[str, float], tuple[Mapping[str, Any], ...], dict[str, float]]:
    """What a resumed confirmation goes on from: the search's answer, the stored runs, and the load
    one step below the last of them."""
    stored = chosen.trial.confirmed or {}
    runs = tuple(stored.get("runs") or ())
    if not runs:
        raise ConfigError(f"confirm --resume: trial {chosen.number} has no stored confirmation runs to go on from")
    if any(r.get("held") for r in runs):
        raise ConfigError(
            f"confirm --resume: trial {chosen.number}'s confirmation already held at "
            f"{describe_answer(stored.get('confirmed_answer') or {})}: nothing to go on with"
        )
    load = space.load_spec() or LoadProbeSpec()  # as confirmation_space takes it
    sending = request_body(load.output_tokens, load.request)
    if (sent := runs[-1].get("body")) != sending:
        said = json.dumps(sent, sort_keys=True) if sent else "one with min_tokens, as tuner sent until 2026-12-06"
        raise ConfigError(
            f"confirm --resume: trial {chosen.number}'s stored runs sent another request body ({said}; now "
            f"{json.dumps(sending, sort_keys=True)}): a step measured with it would not compare with them; "
            "run `tune validate --confirm` afresh (without --resume)"
        )
    answer = {k: float(v) for k, v in (stored.get("answer") or answer_of(space, chosen.trial)).items()}
    key = next(iter(answer))
    below = step_below(float(runs[-1]["at"]), ConfirmProbeSpec.model_fields["step"].default, closed=key == "concurrency")
    if below is None:
        raise ConfigError(f"confirm --resume: trial {chosen.number}'s last run was at one client: no load below it")
    return answer, runs, {key: below}


def _run(scheduler: Scheduler, params: dict[str, Any], where: Any) -> TrialOutcome | str:
    """The one run through ``scheduler``: its outcome, or why it has none."""
    if scheduler.launch(("confirm", 0), params, where) is None:
        return "not launched: " + "; ".join(scheduler.refusals)
    while scheduler.running:
        for future, job in scheduler.wait(timeout=1.0):
            if job.timed_out:
                return f"outran its {scheduler.time_limit:.0f}s limit: stopped"
            try:
                return future.result()
            except TunerError as exc:
                return describe_failure(exc)
        if scheduler.stop_reason:
            scheduler.stop()
            return f"stopped: {scheduler.stop_reason}"
    return "no result"


def _runs(result: TrialOutcome | str, where: Path) -> tuple[list[Mapping[str, Any]], str | None]:
    """The runs the confirmation finished, and why it ended without a result (None: it has one):
    from the probe's result, else those it wrote as it went (:data:`RUNS_FILE`)."""
    if not isinstance(result, str):
        probe = next((p for p in result.probes if p.probe == "confirm"), None)
        if probe is not None:
            return list(probe.details.get("runs") or ()), None
        result = "no confirm result"
    kept = where / RUNS_FILE
    lines = kept.read_text().splitlines() if kept.is_file() else []
    return [json.loads(line) for line in lines if line.strip()], result


def _not_started(result: TrialOutcome | str) -> str | None:
    """Why the confirmation probe ran no run at all (None: it ran, or has no result)."""
    if isinstance(result, str):
        return None
    probe = next((p for p in result.probes if p.probe == "confirm"), None)
    return probe.details.get("not_started") if probe is not None else None


def _kept(kept: Path, lost: str) -> dict[str, Any] | None:
    """A JSON object the run wrote in its folder (None: not written; unreadable: said, with what is ``lost``)."""
    try:
        return dict(json.loads(kept.read_text())) if kept.is_file() else None
    except (OSError, ValueError) as exc:
        logger.warning("confirm: %s unreadable (%s): %s", kept, exc, lost)
        return None


def _cut_run(where: Path) -> dict[str, Any] | None:
    """The run a cut ended, as it had gone so far (:data:`PARTIAL_FILE`; None: no run was under way)."""
    return _kept(where / PARTIAL_FILE, "the cut run's figures are lost")


def _host(where: Path) -> dict[str, Any] | None:
    """What the run ran on (:data:`~tuner.host.fingerprint.HOST_FILE`; None: it never started)."""
    return _kept(where / HOST_FILE, "the host it ran on is not stored")


def _confirmation(
    trial: TrialRecord,
    answer: Mapping[str, float],
    seconds: float,
    runs: Sequence[Mapping[str, Any]],
    failure: str | None,
    cut: Mapping[str, Any] | None = None,
    *,
    host: Mapping[str, Any] | None = None,
    fast: int | None = None,
) -> Confirmation:
    """The stored confirmation: the first run's verdict at the search's answer, every run, the
    load that held (the first run that held throughout), and the run a cut ended (``cut``)."""
    short = (trial.metrics.get(SLO_GOODPUT), trial.metrics.get(SLO_GOODPUT_CI))
    if not runs:
        return Confirmation(
            trial.number,
            answer,
            seconds,
            False,
            0.0,
            None,
            *short,
            0.0,
            (),
            failure=failure or "no result",
            cut_run=cut,
            host=host,
            fast_path=fast,
        )
    first = runs[0]
    kept = next((r for r in runs if r.get("held")), None)
    key = next(iter(answer))
    return Confirmation(
        trial.number,
        answer,
        float(first.get("seconds") or seconds),
        bool(first.get("held")),
        float(first.get("goodput") or 0.0),
        first.get("goodput_ci"),
        *short,
        float(first.get("drift") or 0.0),
        tuple(first.get("broke") or ()),
        tuple(Level.from_dict(s) for s in first.get("slices") or ()),
        failure=failure,
        runs=tuple(runs),
        confirmed_answer={key: float(kept["at"])} if kept else None,
        confirmed_goodput=float(kept["goodput"]) if kept else None,
        confirmed_ci=kept.get("goodput_ci") if kept else None,
        cut_run=cut,
        host=host,
        fast_path=fast,
    )
