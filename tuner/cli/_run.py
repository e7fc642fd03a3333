"""`tune run`: tune a space end to end (the embedded default when no --space is given)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import optuna
import typer

from tuner import engines, objectives, telemetry
from tuner import space as spaces
from tuner.app import prepare
from tuner.artifacts import RunDir
from tuner.cli._common import echo, progress_bar, set_verbosity
from tuner.cli._status import print_table
from tuner.confirm import MARGIN_S, answer_of, confirm
from tuner.confirmed import describe as describe_confirmation
from tuner.confirmed import describe_answer
from tuner.credentials import mask
from tuner.devices import GpuHygiene
from tuner.driver import PAUSED, Driver, RunSummary, TrialReport, fail_interrupted, stop_orphans
from tuner.dryrun import dry_run as plan
from tuner.exceptions import ConfigError
from tuner.executors import Executor, InlineExecutor, RayExecutor
from tuner.ledger import Ledger
from tuner.lock import StudyLock
from tuner.partitions import make_partitions
from tuner.pick import candidates, pareto_front, pick, signs
from tuner.progress import describe
from tuner.screen import screen_for
from tuner.study import open_study
from tuner.table import format_param
from tuner.trials import read_study
from tuner.units import format_duration, parse_duration
from tuner.validate import measure_reference, race, revalidate


def run(
    space: str = typer.Option(None, "--space", "-s", help="space file, or a bare name in search_spaces/"),
    study: str = typer.Option(None, "--study", help="study name (default: the space's name); reruns resume"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    trials: int = typer.Option(None, "--trials", "-n", min=1, help="finished trials the study should have"),
    timeout: str = typer.Option(None, "--timeout", help="stop launching after this long, e.g. 8h, 15m"),
    sampler: str = typer.Option(None, "--sampler", help="tpe | nsga2 | random | gp (default: the space's)"),
    force: bool = typer.Option(False, "--force", help="continue a study even though its space changed"),
    executor: str = typer.Option(
        "ray", "--executor", help="ray (partitions in parallel) | inline (one at a time, in this process)"
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="an existing Ray cluster (default: a local one, started and stopped here)"
    ),
    no_screen: bool = typer.Option(False, "--no-screen", help="launch every proposal, even those predicted to fail"),
    no_remeasure: bool = typer.Option(
        False, "--no-remeasure", help="skip the fresh-server re-measurements (noise floor, front candidates)"
    ),
    artifacts: Path = typer.Option(
        None, "--artifacts", help="the study's artifact store, a path every driver can reach (default runs/<study>/artifacts)"
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="validate, lay out partitions, print the first configs' argv and an estimate; start nothing"
    ),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="-v info, -vv debug logs"),
) -> None:
    """Tune a space: launch real servers, probe them, keep the evidence under runs/<study>/."""
    set_verbosity(verbose)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    the_space, path = prepare.load(space)
    objective = objectives.load(the_space.objectives)
    _check_telemetry(the_space, objective)
    name = study or the_space.name or path.stem
    budget = trials or the_space.budget.trials
    limit = _duration(timeout) if timeout else the_space.budget.timeout
    if dry_run:  # before anything is created: no runs/ folder, no study, no server
        for line in plan(
            the_space,
            path,
            objective,
            budget=budget,
            timeout=limit,
            max_parallel=_max_parallel(the_space) if executor == "ray" else 1,
            sampler=sampler,
        ):
            echo(line)
        return
    run_dir = RunDir.for_study(name, artifacts=artifacts)
    run_dir.root.mkdir(parents=True, exist_ok=True)
    if ray_address and not (storage or "").startswith(("postgresql", "mysql")):
        echo(
            f"warning: --ray-address with SQLite storage ({mask(storage or run_dir.db_url)}): trials on other nodes report to "
            "this "
            "driver, but no driver on another machine can share the study; for several drivers use --storage postgresql://..."
        )
    with StudyLock(run_dir.root / "run.lock", name) as lock:
        the_study = open_study(
            the_space, objective, name=name, storage=storage or run_dir.db_url, source=str(path), force=force, sampler=sampler
        )
        lock.lease(the_study)
        _run_locked(
            the_space,
            path,
            the_study,
            objective,
            run_dir,
            name,
            budget,
            limit,
            executor,
            ray_address,
            no_screen,
            no_remeasure,
            lock,
        )


def _run_locked(
    the_space, path, the_study, objective, run_dir, name, budget, limit, executor, ray_address, no_screen, no_remeasure, lock
) -> None:
    """The run itself, while this process holds the study (recovery must never touch another run's servers)."""
    began = time.monotonic()
    engines.get(the_space.engine).provision(progress_bar)
    ledger = Ledger(run_dir.root / "servers")
    echo(f"study {name}: {path} ({the_space.engine}), {budget} trials, objectives {objective.metric_names}")
    for note in stop_orphans(ledger):
        echo(f"  recovered: {note}")
    runner = _executor(executor, the_space, ray_address, ledger, name)  # on a cluster: sweeps every node, takes its leftovers
    for note in getattr(runner, "recovered", []):
        echo(f"  recovered: {note}")
    for note in fail_interrupted(the_study, run_dir, getattr(runner, "leftovers", None)):
        echo(f"  recovered: {note}")
    driver = Driver(
        the_space,
        the_study,
        objective,
        run_dir,
        runner,
        ledger=ledger,
        # on a cluster each trial checks its own node's GPUs (tuner.executors); NVML here sees only this host
        hygiene=GpuHygiene(the_space.hardware.devices) if the_space.hardware.kind == "gpu" and ray_address is None else None,
        screen=None if no_screen or not the_space.sampler.screen else screen_for(the_space.engine),
        trials=budget,
        timeout=limit,
        trial_timeout=the_space.budget.trial_timeout,
        on_trial=_report,
        on_tick=PhaseLine(engines.get(the_space.engine).startup_phases),
    )
    lock.on_lost = driver.request_stop  # taken over after a stall: stop before telling trials another driver now owns
    hw = the_space.hardware
    echo(f"  {hw.kind} devices {hw.devices}, {runner.max_parallel} trial(s) at a time ({executor})")
    if isinstance(hw.per_trial, int):
        for partition in make_partitions(hw.kind, hw.devices, hw.per_trial)[: runner.max_parallel]:
            echo(f"  {partition.describe()}")
    else:
        echo(f"  trial size from parameter {hw.per_trial!r}: partitions packed first-fit per trial")
    if already := driver.finished():
        echo(f"resuming: {already} trials already finished")
    plan = the_space.remeasure if the_space.remeasure.enabled and not no_remeasure else None
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        driver.request_stop(f"stopped by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, stop) for sig in _SIGNALS} if executor == "ray" else {}
    try:
        if plan is not None and not read_study(the_study, trials=False).noise and plan.reference_runs and the_space.enqueue:
            echo(
                f"noise floor: the reference config (the first enqueued) on {plan.reference_runs} fresh server(s) before the "
                "search"
            )
            measure_reference(
                the_study, the_space, objective, run_dir, driver.scheduler, runs=plan.reference_runs, on_run=_remeasured
            )
        summary = _search(driver, the_study, the_space, objective, run_dir, plan, budget)
        if plan is not None and not driver.stop_requested:
            _remeasure_front(the_study, the_space, objective, run_dir, driver.scheduler, plan, budget)
        if plan is not None and plan.confirm and not driver.stop_requested:
            _confirm(
                the_study,
                the_space,
                run_dir,
                runner,
                ledger,
                plan.confirm,
                None if limit is None else limit - (time.monotonic() - began),
            )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        runner.shutdown()
    echo(f"\nstopped: {summary.stop_reason}; {summary.launched} launched in {format_duration(summary.wall_s)}")
    print_table(the_study)
    echo(
        f"\nevidence: {run_dir.root}/ (trials.csv, trials/<n>/server.log, outcome.json, evidence.json), and in the study's "
        f"artifact store {run_dir.artifacts}/ (optuna-dashboard STORAGE --artifact-dir {run_dir.artifacts})"
    )
    if received:  # scripts must tell a stopped run from a finished one: 128 + the signal, as shells do
        raise typer.Exit(128 + received[0])


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _search(driver, study, space, objective, run_dir, plan, budget) -> RunSummary:
    """The search; where the space asks (remeasure.every), paused after every K trials to run the
    reference on a fresh server again, so drift during a long night is seen, not guessed."""
    total = RunSummary()
    pauses = [
        n
        for n in (plan.pauses(budget) if plan is not None and read_study(study, trials=False).noise else [])
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
        echo(f"reference again after {driver.finished()} trials (fresh server): drift check")
        noise = measure_reference(
            study, space, objective, run_dir, driver.scheduler, runs=1, on_run=_remeasured, when=f"after{driver.finished()}"
        )
        if noise and noise.get("drift") is not None:
            echo(f"  drift: the reference moved {noise['drift']:+.1%} since the start, beyond the noise")
    return total


def _remeasure_front(study, space, objective, run_dir, scheduler, plan, budget) -> None:
    """The front candidates and the reference again on fresh servers, interleaved."""
    front = len(pareto_front(candidates(study), signs(study)))
    top, repeats = plan.plan(budget, front)
    if not top:
        echo("\nre-measure: no budget share left for the front candidates (remeasure.share)")
        return
    echo(f"\nre-measure: {top} front candidate(s) and the reference, {repeats} more fresh server(s) each, interleaved")
    revalidate(study, space, objective, run_dir, scheduler, top=top, repeats=repeats, on_run=_remeasured)
    if plan.race:
        echo(f"race: the pick and the configs it ties with, once more each per round (at most {plan.race} launches)")
        used = race(study, space, objective, run_dir, scheduler, budget=plan.race, on_run=_remeasured)
        echo(f"  {used} launch(es) spent breaking ties")


def _confirm(study, space, run_dir, runner, ledger, seconds: float, left: float | None) -> None:
    """The pick once more, long, at its SLO answer on a fresh server (remeasure.confirm), when the
    run's time budget still holds it; said in one line when it does not."""
    need = seconds + space.server.startup_timeout + MARGIN_S
    if left is not None and left < need:
        echo(f"\nconfirm: skipped, {format_duration(max(left, 0))} of the run's timeout left, {format_duration(need)} needed")
        return
    try:
        chosen = pick(study, "knee")
        answer = answer_of(space, chosen.trial)
    except ConfigError as exc:
        echo(f"\nconfirm: skipped, {exc}")
        return
    at = describe_answer(answer)
    echo(f"\nconfirm: the pick (trial {chosen.number}) at {at} for {format_duration(seconds)} on a fresh server")
    found = confirm(study, space, run_dir, runner, chosen, seconds=seconds, ledger=ledger)
    for line in describe_confirmation(found.to_dict(), found.trial):
        echo(f"  {line}")


def _remeasured(label: str, repeat: int, text: str) -> None:
    echo(f"  {label} run {repeat + 1}: {text}")


def _executor(kind: str, space: spaces.SearchSpace, address: str | None, ledger: Ledger, study: str = "default") -> Executor:
    hw = space.hardware
    if kind == "inline":
        return InlineExecutor()
    if kind != "ray":
        raise ConfigError(f"--executor: {kind!r} is not one of ray, inline")
    return RayExecutor(hw.devices, hw.kind, max_parallel=_max_parallel(space), address=address, ledger=ledger, node_key=study)


def _max_parallel(space: spaces.SearchSpace) -> int:
    """Trials at a time: how many partitions of the smallest trial size fit the devices."""
    hw = space.hardware
    smallest = hw.per_trial if isinstance(hw.per_trial, int) else _smallest_size(space)
    return max(1, len(hw.devices) // smallest)


def _smallest_size(space: spaces.SearchSpace) -> int:
    per_trial = space.hardware.per_trial
    if isinstance(per_trial, int):
        return per_trial
    param = space.parameters[per_trial]  # validated to exist
    values = getattr(param, "choices", None) or [getattr(param, "low", 1)]
    return max(1, min(int(v) for v in values))


def _check_telemetry(space: spaces.SearchSpace, objective: objectives.ObjectiveSet) -> None:
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


class PhaseLine:
    """What each running trial is doing, between the trial lines: rewritten in place on a
    terminal (stderr), printed once per change of phase when piped."""

    def __init__(self, startup_phases: tuple[tuple[str, str], ...]) -> None:
        self.startup_phases = startup_phases
        self.last = ""
        self.tty = sys.stderr.isatty()

    def __call__(self, running: list) -> None:  # (number, partition, trial dir)
        parts = [
            (f"trial {n} [{p.kind} {','.join(map(str, p.devices))}]", describe(d, self.startup_phases)) for n, p, d in running
        ]
        if self.tty:
            line = " | ".join(f"{who}: {what}" for who, what in parts)
            sys.stderr.write("\r" + line[:200].ljust(200) + "\r")
            sys.stderr.flush()
            return
        changed = " | ".join(f"{who}: {what.rsplit(' (for', 1)[0]}" for who, what in parts)
        if changed != self.last:
            self.last = changed
            echo(f"    ... {changed}")


def _report(r: TrialReport) -> None:
    params = " ".join(f"{k}={format_param(v)}" for k, v in r.params.items())
    values = ""
    if r.values is not None:
        names = r.names or tuple(f"objective {i}" for i in range(len(r.values)))
        values = ", ".join(f"{name} {v:,.1f}" for name, v in zip(names, r.values, strict=True)) + " | "
    eta = f" ETA {format_duration(r.eta_s)}" if r.eta_s is not None and r.done < r.total else ""
    echo(
        f"[{r.done}/{r.total}] trial {r.number} {r.state:<8} {values}{r.summary[:120]}"
        f"  ({format_duration(r.wall_s)}; elapsed {format_duration(r.elapsed_s)}{eta})\n    {params}"
    )
