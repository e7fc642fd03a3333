"""Running a study, end to end, behind one typed configuration: the lock and lease, recovery of
what a crashed run left, the reference runs, the search with its drift pauses, the front's
re-measurement and race, the long confirmation, and SIGINT/SIGTERM as a clean stop. The command
line builds a :class:`RunConfig` (:func:`configure`), calls :func:`run_study` and prints what it
is told through :class:`RunEvents`; nothing here prints."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from tuner import engines, objectives
from tuner.app import prepare
from tuner.base.artifacts import RunDir
from tuner.base.credentials import mask
from tuner.base.exceptions import ConfigError
from tuner.base.units import format_duration, parse_duration
from tuner.host import busy, telemetry
from tuner.host.devices import GpuHygiene
from tuner.host.ledger import Ledger
from tuner.host.partitions import Partition, make_partitions
from tuner.launching.executors import Executor, InlineExecutor, RayExecutor
from tuner.launching.scheduler import Scheduler
from tuner.orchestration.confirm import MARGIN_S, answer_of, confirm
from tuner.orchestration.deadline import FIRST_ANSWER, Deadline
from tuner.orchestration.driver import PAUSED, Driver, RunSummary, TrialReport, fail_interrupted, stop_orphans
from tuner.orchestration.dryrun import dry_run, end_launches, expected_line, launch_seconds, trial_timeout_line
from tuner.orchestration.validate import measure_reference, race, revalidate
from tuner.results.confirmation import describe as describe_confirmation
from tuner.results.confirmation import describe_answer
from tuner.results.pick import candidates, pareto_front, pick, signs
from tuner.results.screen import screen_for
from tuner.space import RemeasureSpec, SearchSpace
from tuner.trials import StudyRecord, read_study
from tuner.trials.lock import StudyLock
from tuner.trials.study import open_study

__all__ = ["RunConfig", "RunEvents", "RunResult", "configure", "plan_lines", "run_study", "trial_cores"]

EXECUTORS = ("ray", "inline")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class RunConfig:
    """Everything one `tune run` decides before it starts: the space and objective set (loaded
    and cross-checked), the study and where it lives, the budget, how trials run."""

    space: SearchSpace
    source: Path
    objective: objectives.ObjectiveSet
    study: str
    storage: str | None
    trials: int
    timeout: float | None
    sampler: str | None = None
    force: bool = False
    executor: str = "ray"
    ray_address: str | None = None
    screen: bool = True
    remeasure: bool = True
    artifacts: Path | None = None

    @property
    def max_parallel(self) -> int:
        return max_parallel(self.space) if self.executor == "ray" else 1

    @property
    def plan(self) -> RemeasureSpec | None:
        """The space's re-measurement plan, where it is on and not switched off for this run."""
        return self.space.remeasure if self.space.remeasure.enabled and self.remeasure else None


@dataclass
class RunEvents:
    """What a run tells whoever shows it: lines, each trial's end, the running trials' phases."""

    say: Callable[[str], None] = lambda line: None
    progress: Callable[[float, str], None] | None = None  # the engine's install (the llama.cpp build)
    on_trial: Callable[[TrialReport], None] | None = None
    on_tick: Callable[[list[tuple[int, Partition, Path]]], None] | None = None


@dataclass
class RunResult:
    summary: RunSummary
    record: StudyRecord
    run_dir: RunDir
    signals: list[int] = field(default_factory=list)  # the signals that stopped it (scripts exit 128 + the first)


def configure(
    space: str | None,
    *,
    study: str | None = None,
    storage: str | None = None,
    trials: int | None = None,
    timeout: str | None = None,
    **options: Any,
) -> RunConfig:
    """The run configuration from the command line's words: the space loaded and checked, its
    objective set, the study name (default: the space's), the budget (default: the space's)."""
    the_space, path = prepare.load(space)
    objective = objectives.load(the_space.objectives)
    _check_telemetry(the_space, objective)
    executor = options.get("executor", "ray")
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor: {executor!r} is not one of {', '.join(EXECUTORS)}")
    return RunConfig(
        space=the_space,
        source=path,
        objective=objective,
        study=study or the_space.name or path.stem,
        storage=storage,
        trials=trials or the_space.budget.trials,
        timeout=_duration(timeout) if timeout else the_space.budget.timeout,
        **options,
    )


def plan_lines(config: RunConfig) -> list[str]:
    """What a dry run shows: the space, partitions, the first configs' argv, an estimate."""
    return dry_run(
        config.space,
        config.source,
        config.objective,
        budget=config.trials,
        timeout=config.timeout,
        max_parallel=config.max_parallel,
        sampler=config.sampler,
    )


def run_study(config: RunConfig, events: RunEvents) -> RunResult:
    """Run the study of ``config`` to its end (budget, timeout, or a signal) while holding its
    lock and lease; every server it starts is ended, also on SIGINT/SIGTERM."""
    say = events.say
    run_dir = RunDir.for_study(config.study, artifacts=config.artifacts)
    run_dir.root.mkdir(parents=True, exist_ok=True)
    sqlite = not (config.storage or "").startswith(("postgresql", "mysql"))
    if config.ray_address and sqlite:
        say(
            f"warning: --ray-address with SQLite storage ({mask(config.storage or run_dir.db_url)}): trials on other nodes "
            "report to this driver, but no driver on another machine can share the study; for several drivers use "
            "--storage postgresql://..."
        )
    with StudyLock(run_dir.root / "run.lock", config.study) as lock:
        study = open_study(
            config.space,
            config.objective,
            name=config.study,
            storage=config.storage or run_dir.db_url,
            source=str(config.source),
            force=config.force,
            sampler=config.sampler,
        )
        lock.lease(study)
        return _run_locked(config, study, run_dir, lock, events)


def _run_locked(config: RunConfig, study: optuna.Study, run_dir: RunDir, lock: StudyLock, events: RunEvents) -> RunResult:
    """The run itself, while this process holds the study (recovery must never touch another run's servers)."""
    say, space = events.say, config.space
    began = time.monotonic()
    adapter = engines.get(space.engine)
    installed = adapter.installed()[0] is not None
    say(expected_line(space, budget=config.trials, max_parallel=config.max_parallel, installed=installed))  # before the install
    if (short := trial_timeout_line(space)) is not None:
        say(short)
    adapter.provision(events.progress)
    deadline = _deadline(config, began, say)
    if config.ray_address is None and (warning := busy.describe(busy.busy_cores(trial_cores(config.space)))):
        say(warning)  # before Ray or any server of ours starts: what the sample sees is other work
    ledger = Ledger(run_dir.root / "servers")
    names = config.objective.metric_names
    say(f"study {config.study}: {config.source} ({space.engine}), {config.trials} trials, objectives {names}")
    for note in stop_orphans(ledger):
        say(f"  recovered: {note}")
    runner = _executor(config, ledger)  # on a cluster: sweeps every node, takes its leftovers
    for note in [*runner.recovered, *fail_interrupted(study, run_dir, runner.leftovers)]:
        say(f"  recovered: {note}")
    driver = Driver(
        space,
        study,
        config.objective,
        run_dir,
        runner,
        ledger=ledger,
        # on a cluster each trial checks its own node's GPUs (tuner.launching.executors); NVML here sees only this host
        hygiene=GpuHygiene(space.hardware.devices) if space.hardware.kind == "gpu" and config.ray_address is None else None,
        screen=screen_for(space.engine) if config.screen and space.sampler.screen else None,
        trials=config.trials,
        timeout=config.timeout,
        deadline=deadline,
        trial_timeout=space.budget.trial_timeout,
        on_trial=events.on_trial,
        on_tick=events.on_tick,
    )
    lock.on_lost = driver.request_stop  # taken over after a stall: stop before telling trials another driver now owns
    _layout(config, runner, say)
    if already := driver.finished():
        say(f"resuming: {already} trials already finished")
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        driver.request_stop(f"stopped by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, stop) for sig in SIGNALS} if config.executor == "ray" else {}
    try:
        summary = _phases(config, study, run_dir, driver, runner, ledger, began, say, deadline)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        runner.shutdown()
    return RunResult(summary, read_study(study), run_dir, received)


def _deadline(config: RunConfig, began: float, say: Callable[[str], None]) -> Deadline | None:
    """The run's deadline (``budget.deadline``), counted from before the install, said once the
    install is done: what is left for the search and the runs after it."""
    space = config.space
    if space.budget.deadline is None:
        return None
    deadline = Deadline.starting(
        began,
        space.budget.deadline,
        estimate_s=launch_seconds(space),
        end_launches=end_launches(space, config.trials) if config.plan is not None else 0,
        parallel=config.max_parallel,
    )
    installed_s = time.monotonic() - began
    say(
        f"deadline: {format_duration(deadline.seconds)} (budget.deadline); {format_duration(installed_s)} gone to the install, "
        f"{format_duration(max(0.0, deadline.left()))} left: trials run while one (up to {format_duration(deadline.launch_s)} "
        f"until one has ended) and, after the first {FIRST_ANSWER}, the end's {deadline.end_launches} fresh-server run(s) "
        "still fit"
    )
    if not deadline.room_for_trial(0):
        say("  no trial fits in what the install left: run `tune run` again (the install is cached) for the search")
    return deadline


def trial_cores(space: SearchSpace) -> set[int]:
    """The CPU cores this run's trials use on this host: a CPU partition's own cores, a GPU
    partition's server and client cores (all this process may use where trials are sized per trial)."""
    hw = space.hardware
    if not isinstance(hw.per_trial, int):
        return set(hw.devices) if hw.kind == "cpu" else os.sched_getaffinity(0)
    partitions = make_partitions(hw.kind, hw.devices, hw.per_trial)
    return {core for p in partitions for core in (p.devices if p.kind == "cpu" else (*p.cpus, *p.client_cpus))}


def _layout(config: RunConfig, runner: Executor, say: Callable[[str], None]) -> None:
    hw = config.space.hardware
    say(f"  {hw.kind} devices {hw.devices}, {runner.max_parallel} trial(s) at a time ({config.executor})")
    if isinstance(hw.per_trial, int):
        for partition in make_partitions(hw.kind, hw.devices, hw.per_trial)[: runner.max_parallel]:
            say(f"  {partition.describe()}")
    else:
        say(f"  trial size from parameter {hw.per_trial!r}: partitions packed first-fit per trial")


def _phases(
    config: RunConfig,
    study: optuna.Study,
    run_dir: RunDir,
    driver: Driver,
    runner: Executor,
    ledger: Ledger,
    began: float,
    say: Callable[[str], None],
    deadline: Deadline | None = None,
) -> RunSummary:
    """The reference before the search, the search, the front again on fresh servers, the
    confirmation: each where the space's plan asks for it, no stop was requested and the
    deadline, if any, leaves the time."""
    space, objective, plan = config.space, config.objective, config.plan
    remeasured = _remeasured(say)
    if plan is not None and not read_study(study, trials=False).noise and plan.reference_runs and space.enqueue:
        if deadline is not None and not deadline.room_for_reference():
            room = format_duration(deadline.left())
            say(f"noise floor: no reference run before the search: {room} left before the deadline, the first trials come first")
        else:
            say(
                f"noise floor: the reference config (the first enqueued) on {plan.reference_runs} fresh server(s) "
                "before the search"
            )
            started = time.monotonic()
            measure_reference(study, space, objective, run_dir, driver.scheduler, runs=plan.reference_runs, on_run=remeasured)
            if deadline is not None:  # a fresh-server run is a trial's length: the deadline's first measure of one
                deadline.observe((time.monotonic() - started) / plan.reference_runs)
    summary = _search(driver, study, config, run_dir, say)
    if deadline is not None:
        say(
            f"\ndeadline: the search ran {summary.launched} trial(s) of {config.trials} in {format_duration(summary.wall_s)} "
            f"(the longest {format_duration(deadline.launch_s)}); {format_duration(max(0.0, deadline.left()))} left"
        )
    if plan is not None and not driver.stop_requested:
        _remeasure_front(study, config, run_dir, driver.scheduler, plan, say, deadline)
    if plan is not None and plan.confirm and not driver.stop_requested:
        left = None if config.timeout is None else config.timeout - (time.monotonic() - began)
        if deadline is not None:
            left = deadline.left() if left is None else min(left, deadline.left())
        _confirm(study, space, run_dir, runner, ledger, plan.confirm, left, say)
    return summary


def _search(driver: Driver, study: optuna.Study, config: RunConfig, run_dir: RunDir, say: Callable[[str], None]) -> RunSummary:
    """The search; where the space asks (remeasure.every), paused after every K trials to run the
    reference on a fresh server again, so drift during a long night is seen, not guessed."""
    plan, total = config.plan, RunSummary()
    pauses = [
        n
        for n in (plan.pauses(config.trials) if plan is not None and read_study(study, trials=False).noise else [])
        if n > driver.finished()
    ]
    for pause in [*pauses, None]:
        summary = driver.run(pause_at=pause)
        total.launched += summary.launched
        total.wall_s += summary.wall_s
        for state, count in summary.states.items():
            total.states[state] = total.states.get(state, 0) + count
        total.stop_reason = summary.stop_reason
        if summary.stop_reason != PAUSED:
            break
        say(f"reference again after {driver.finished()} trials (fresh server): drift check")
        noise = measure_reference(
            study,
            config.space,
            config.objective,
            run_dir,
            driver.scheduler,
            runs=1,
            on_run=_remeasured(say),
            when=f"after{driver.finished()}",
        )
        if noise and noise.get("drift") is not None:
            say(f"  drift: the reference moved {noise['drift']:+.1%} since the start, beyond the noise")
    return total


def _remeasure_front(
    study: optuna.Study,
    config: RunConfig,
    run_dir: RunDir,
    scheduler: Scheduler,
    plan: RemeasureSpec,
    say: Callable[[str], None],
    deadline: Deadline | None = None,
) -> None:
    """The front candidates and the reference again on fresh servers, interleaved; under a
    deadline, as many candidates as its time left allows."""
    front = len(pareto_front(candidates(study), signs(study)))
    top, repeats = plan.plan(config.trials, front)
    if not top:
        say("\nre-measure: no budget share left for the front candidates (remeasure.share)")
        return
    if deadline is not None and (top + 1) * repeats > (fit := deadline.launches_left()):
        fewer = max(0, fit // repeats - 1)
        say(
            f"\nre-measure: {fit} fresh-server run(s) fit before the deadline "
            f"at up to {format_duration(deadline.launch_s)} each: "
            + (f"{fewer} front candidate(s) of {top}" if fewer else "none, so the front stays as the search measured it")
        )
        if not fewer:
            return
        top = fewer
    say(f"\nre-measure: {top} front candidate(s) and the reference, {repeats} more fresh server(s) each, interleaved")
    space, objective, remeasured = config.space, config.objective, _remeasured(say)
    revalidate(study, space, objective, run_dir, scheduler, top=top, repeats=repeats, on_run=remeasured)
    if plan.race:
        say(f"race: the pick and the configs it ties with, once more each per round (at most {plan.race} launches)")
        used = race(study, space, objective, run_dir, scheduler, budget=plan.race, on_run=remeasured)
        say(f"  {used} launch(es) spent breaking ties")


def _confirm(
    study: optuna.Study,
    space: SearchSpace,
    run_dir: RunDir,
    runner: Executor,
    ledger: Ledger,
    seconds: float,
    left: float | None,
    say: Callable[[str], None],
) -> None:
    """The pick once more, long, at its SLO answer on a fresh server (remeasure.confirm), when the
    run's time budget still holds it; said in one line when it does not."""
    need = seconds + space.server.startup_timeout + MARGIN_S
    if left is not None and left < need:
        say(f"\nconfirm: skipped, {format_duration(max(left, 0))} of the run's timeout left, {format_duration(need)} needed")
        return
    try:
        chosen = pick(study, "knee")
        answer = answer_of(space, chosen.trial)
    except ConfigError as exc:
        say(f"\nconfirm: skipped, {exc}")
        return
    at = describe_answer(answer)
    say(f"\nconfirm: the pick (trial {chosen.number}) at {at} for {format_duration(seconds)} on a fresh server")
    budget = None if left is None else left - space.server.startup_timeout - MARGIN_S  # the steps down, if it breaks
    found = confirm(study, space, run_dir, runner, chosen, seconds=seconds, ledger=ledger, budget=budget)
    for line in describe_confirmation(found.to_dict(), found.trial):
        say(f"  {line}")


def _remeasured(say: Callable[[str], None]) -> Callable[[str, int, str], None]:
    return lambda label, repeat, text: say(f"  {label} run {repeat + 1}: {text}")


def _executor(config: RunConfig, ledger: Ledger) -> Executor:
    if config.executor == "inline":
        return InlineExecutor()
    hw = config.space.hardware
    return RayExecutor(
        hw.devices,
        hw.kind,
        max_parallel=config.max_parallel,
        address=config.ray_address,
        ledger=ledger,
        node_key=config.study,
    )


def max_parallel(space: SearchSpace) -> int:
    """Trials at a time: how many partitions of the smallest trial size fit the devices."""
    hw = space.hardware
    smallest = hw.per_trial if isinstance(hw.per_trial, int) else _smallest_size(space)
    return max(1, len(hw.devices) // smallest)


def _smallest_size(space: SearchSpace) -> int:
    per_trial = space.hardware.per_trial
    if isinstance(per_trial, int):
        return per_trial
    param = space.parameters[per_trial]  # validated to exist
    values: Sequence[Any] = getattr(param, "choices", None) or [getattr(param, "low", 1)]
    return max(1, min(int(v) for v in values))


def _check_telemetry(space: SearchSpace, objective: objectives.ObjectiveSet) -> None:
    """An objective on power or energy needs a machine that measures them: refuse it up front,
    in one line, instead of failing every trial."""
    needs = sorted({m for _, m in objective.metric_refs() if m.startswith("telemetry.")})
    if not needs:
        return
    sampler = telemetry.for_partition(space.hardware.kind, space.hardware.devices[:1])
    if sampler.reader is None:
        raise ConfigError(
            f"objectives: {objective.name} uses {', '.join(needs)}, but this machine measures no energy: "
            f"{sampler.source.removeprefix('none: ')}"
        )


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"--timeout: {exc}") from None
