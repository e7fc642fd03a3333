"""`tune run`: tune a space end to end (the embedded default when no --space is given)."""

from __future__ import annotations

import optuna
import typer

from tuner import engines, objectives
from tuner import space as spaces
from tuner.artifacts import RunDir
from tuner.cli._common import echo, progress_bar, set_verbosity
from tuner.cli._status import print_table
from tuner.driver import Driver, TrialReport
from tuner.exceptions import ConfigError
from tuner.executors import InlineExecutor
from tuner.partitions import make_partitions
from tuner.study import open_study
from tuner.units import format_duration, parse_duration


def run(
    space: str = typer.Option(None, "--space", "-s", help="space file, or a bare name in search_spaces/"),
    study: str = typer.Option(None, "--study", help="study name (default: the space's name); reruns resume"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    trials: int = typer.Option(None, "--trials", "-n", min=1, help="finished trials the study should have"),
    timeout: str = typer.Option(None, "--timeout", help="stop launching after this long, e.g. 8h, 15m"),
    sampler: str = typer.Option(None, "--sampler", help="tpe | nsga2 | random | gp (default: the space's)"),
    force: bool = typer.Option(False, "--force", help="continue a study even though its space changed"),
    verbose: int = typer.Option(0, "--verbose", "-v", count=True, help="-v info, -vv debug logs"),
) -> None:
    """Tune a space: launch real servers, probe them, keep the evidence under runs/<study>/."""
    set_verbosity(verbose)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    the_space, path = spaces.load(space)
    objective = objectives.load(the_space.objectives)
    name = study or the_space.name or path.stem
    budget = trials or the_space.budget.trials
    limit = _duration(timeout) if timeout else the_space.budget.timeout
    run_dir = RunDir.for_study(name)
    run_dir.root.mkdir(parents=True, exist_ok=True)
    the_study = open_study(
        the_space, objective, name=name, storage=storage or run_dir.db_url, source=str(path), force=force, sampler=sampler
    )
    engines.get(the_space.engine).provision(progress_bar)
    hw = the_space.hardware
    partitions = make_partitions(hw.kind, hw.devices, len(hw.devices) if isinstance(hw.per_trial, str) else hw.per_trial)
    executor = InlineExecutor(partitions)
    echo(f"study {name}: {path} ({the_space.engine}), {budget} trials, objectives {objective.metric_names}")
    for p in executor.partitions:
        echo(f"  {p.describe()}")
    driver = Driver(the_space, the_study, objective, run_dir, executor, trials=budget, timeout=limit, on_trial=_report)
    already = driver.finished()
    if already:
        echo(f"resuming: {already} trials already finished")
    summary = driver.run()
    echo(f"\nstopped: {summary.stop_reason}; {summary.launched} launched in {format_duration(summary.wall_s)}")
    print_table(the_study)
    echo(f"\nevidence: {run_dir.root}/ (trials.csv, trials/<n>/server.log, outcome.json, evidence.json)")


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"--timeout: {exc}") from None


def _report(r: TrialReport) -> None:
    params = " ".join(f"{k}={v}" for k, v in r.params.items())
    values = ""
    if r.values is not None:
        values = " ".join(f"{v:.1f}" for v in r.values) + " | "
    eta = f" ETA {format_duration(r.eta_s)}" if r.eta_s is not None and r.done < r.total else ""
    echo(
        f"[{r.done}/{r.total}] trial {r.number} {r.state:<8} {values}{r.summary[:120]}"
        f"  ({format_duration(r.wall_s)}; elapsed {format_duration(r.elapsed_s)}{eta})\n    {params}"
    )
