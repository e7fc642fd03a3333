"""`tune pareto`: the fronts of one or more studies on two metrics — table, PNG, HTML, hypervolume."""

from __future__ import annotations

from pathlib import Path

import typer
from optuna.trial import TrialState

from tuner.app.read import read_record
from tuner.base.exceptions import ConfigError
from tuner.base.metrics import LOAD_OUTPUT_TOK_S
from tuner.cli._common import echo
from tuner.results.pareto import fronts
from tuner.results.pick import context_metric, objective_metrics, pick, role_index
from tuner.results.plots import front_html, front_png
from tuner.trials import StudyRecord


def pareto(
    studies: list[str] = typer.Option(..., "--study", help="study name, or NAME=STORAGE_URL; repeat to overlay"),
    storage: str = typer.Option(
        None, "--storage", help="Optuna storage URL of the studies given by name (default: runs/<study>/study.db)"
    ),
    x: str = typer.Option(
        None,
        "--x",
        help="metric on x (default: the first study's context metric: its context objective, else the configured context)",
    ),
    y: str = typer.Option(None, "--y", help="metric on y (default: the first study's throughput objective)"),
    out: Path = typer.Option(None, "--out", help="file prefix for .png and .html (default runs/pareto-<studies>)"),
    ref_x: float = typer.Option(0.0, "--ref-x", help="hypervolume reference point, x"),
    ref_y: float = typer.Option(0.0, "--ref-y", help="hypervolume reference point, y"),
) -> None:
    """Non-dominated feasible trials of each study; pruned/infeasible ones drawn faintly."""
    opened: dict[str, StudyRecord] = {}
    for spec in studies:
        name = spec.split("=", 1)[0]
        opened[name] = read_record(name, spec if "=" in spec else storage)
    first = next(iter(opened.values()))
    names = list(first.metric_names or [])
    y = y or (names[role_index(first, "throughput") or 0] if names else LOAD_OUTPUT_TOK_S)
    x = x or context_metric(first)
    for flag, metric in (("--x", x), ("--y", y)):
        _check_metric(opened, flag, metric)
    result = fronts(opened, x, y, (ref_x, ref_y))
    for f in result:
        echo(f"\n{f.name}: {len(f.front)} on the front, hypervolume {f.hypervolume:,.1f} (reference {ref_x:g}, {ref_y:g})")
        echo(f"  {'trial':>5}  {x:>28}  {y:>22}  params")
        for p in f.front:
            echo(f"  {p.trial:>5}  {p.x:>28,.1f}  {p.y:>22,.1f}  {p.params}")
        if f.faint:
            echo("  not feasible: " + ", ".join(f"#{p.trial} {p.signature or p.state}" for p in f.faint))
        try:
            echo(f"  pick (knee): {pick(opened[f.name], 'knee').describe(objective_metrics(opened[f.name]))}")
        except ConfigError:
            echo("  pick: none (no complete, feasible trial)")
    prefix = out or Path("runs") / ("pareto-" + "-".join(opened))
    prefix.parent.mkdir(parents=True, exist_ok=True)
    front_png(result, x, y, prefix.with_suffix(".png"))
    front_html(result, x, y, prefix.with_suffix(".html"))
    echo(f"\nwrote {prefix.with_suffix('.png')} and {prefix.with_suffix('.html')}")


def _check_metric(studies: dict[str, StudyRecord], flag: str, metric: str) -> None:
    """A metric no measured trial of a study has would draw empty plots: refuse it by name."""
    for name, study in studies.items():
        known = set()
        for t in study.with_state(TrialState.COMPLETE):
            known |= set(t.metrics)
        if known and metric not in known:
            close = sorted(k for k in known if metric.split(".")[-1].split("@")[0] in k)[:6] or sorted(known)[:8]
            raise ConfigError(f"{flag}: no trial of study {name!r} has metric {metric!r} (e.g. {', '.join(close)})")
