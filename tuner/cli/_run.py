"""`tune run`: tune a space end to end (the embedded default when no --space is given): the
options become a run configuration (tuner.app.run), the run reports lines and trials, and this
prints them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer

from tuner import engines
from tuner.app.run import RunEvents, configure, plan_lines, run_study
from tuner.base.progress import describe
from tuner.base.units import format_duration
from tuner.cli._common import echo, progress_bar, set_verbosity, terminal_width
from tuner.cli._status import print_table
from tuner.host.partitions import Partition
from tuner.orchestration.driver import TrialReport
from tuner.results.table import format_param

T = TypeVar("T")


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
    config = configure(
        space, study=study, storage=storage, trials=trials, timeout=timeout, sampler=sampler, force=force,
        executor=executor, ray_address=ray_address, screen=not no_screen, remeasure=not no_remeasure, artifacts=artifacts,
    )  # fmt: skip
    if dry_run:  # before anything is created: no runs/ folder, no study, no server
        for line in plan_lines(config):
            echo(line)
        return
    phases = engines.get(config.space.engine).startup_phases
    phase = PhaseLine(phases)
    events = RunEvents(say=phase.before(echo), progress=progress_bar, on_trial=phase.before(_report), on_tick=phase)
    result = run_study(config, events)
    summary, root, store = result.summary, result.run_dir.root, result.run_dir.artifacts
    echo(f"\nstopped: {summary.stop_reason}; {summary.launched} launched in {format_duration(summary.wall_s)}")
    print_table(result.record)
    echo(
        f"\nevidence: {root}/ (trials.csv, trials/<n>/server.log, outcome.json, evidence.json), and in the study's "
        f"artifact store {store}/ (optuna-dashboard STORAGE --artifact-dir {store})"
    )
    if result.signals:  # scripts must tell a stopped run from a finished one: 128 + the signal, as shells do
        raise typer.Exit(128 + result.signals[0])


class PhaseLine:
    """What each running trial is doing, between the trial lines: rewritten in place on a
    terminal (stderr), printed once per change of phase when piped. In place means within the
    terminal's width: a line padded past it wraps, and each rewrite left one more copy on the
    screen (a 100-column tmux pane filled with them, issue 40)."""

    def __init__(self, startup_phases: tuple[tuple[str, str], ...]) -> None:
        self.startup_phases = startup_phases
        self.last = ""
        self.tty = sys.stderr.isatty()
        self.shown = False

    def __call__(self, running: list[tuple[int, Partition, Path]]) -> None:
        parts = [
            (f"trial {n} [{p.kind} {','.join(map(str, p.devices))}]", describe(d, self.startup_phases)) for n, p, d in running
        ]
        if self.tty:
            line = " | ".join(f"{who}: {what}" for who, what in parts)
            sys.stderr.write("\r" + line[: terminal_width() - 1] + "\x1b[K")  # erase the rest of the line
            sys.stderr.flush()
            self.shown = True
            return
        changed = " | ".join(f"{who}: {what.rsplit(' (for', 1)[0]}" for who, what in parts)
        if changed != self.last:
            self.last = changed
            echo(f"    ... {changed}")

    def clear(self) -> None:
        """Erase the phase line on the terminal, so that the next line printed starts clean."""
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False

    def before(self, show: Callable[[T], None]) -> Callable[[T], None]:
        """``show`` with the phase line erased first."""

        def shown(item: T) -> None:
            self.clear()
            show(item)

        return shown


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
