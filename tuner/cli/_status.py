"""`tune status`: the trials table of a study and its best trials so far."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import optuna
import typer

from tuner.app.read import read_record
from tuner.base.metrics import (
    SLO_ACHIEVED_OVER_OFFERED,
    SLO_COMPLETION_RATE,
    SLO_CONCURRENCY,
    SLO_CONCURRENCY_VIOLATED,
    SLO_HELD_S,
    SLO_RATE,
    SLO_RATE_CLIENT_BOUND,
    SLO_RATE_VIOLATED,
)
from tuner.cli._common import echo, echo_wide, terminal_width
from tuner.results.confirmation import describe as describe_confirmation
from tuner.results.confirmation import hold_past_kv_pool, kv_pool, other_host, uncorrected_failure
from tuner.results.confirmation import steps as confirmation_steps
from tuner.results.gain import gains
from tuner.results.hosts import unlike_hosts
from tuner.results.pick import candidates, describe_noise, objective_metrics, pareto_front, pick, signs
from tuner.results.screen import describe_screen, screen_for
from tuner.results.table import summary_rows
from tuner.space import SearchSpace
from tuner.trials import StudyRecord, record_of
from tuner.trials.lock import stale_running


def status(
    study: str = typer.Option(..., "--study", help="study name"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
) -> None:
    """Show every trial of a study and the best (Pareto-optimal, feasible) ones."""
    print_table(read_record(study, storage))


def print_table(study: optuna.Study | StudyRecord, width: int | None = None) -> None:
    """The trials, fitted to the terminal (``width``): key columns only; `tune trials` has them all."""
    record = record_of(study)
    space = SearchSpace.model_validate(record.space) if record.space else None
    rows = summary_rows(record, space)
    if not rows:
        echo("no trials yet")
        return
    params = list(dict.fromkeys(k for t in record.trials for k in t.params))
    results = [k for k in rows[0] if k not in ("#", "note", *params)]
    echo_wide(rows, lead=["#"], groups=[results, params], width=width or terminal_width())
    counts = dict(Counter(str(r["state"]) for r in rows))
    echo(f"\ntrials by state: {counts}")
    for line in space.describe_workload() if space else []:
        echo(line)
    if counts.get("RUNNING") and (stale := stale_running(record)):
        echo(stale)
    print_noise(record)
    for line in screen_lines(record, space):
        echo(line)
    print_best(record, space)


def screen_lines(study: optuna.Study | StudyRecord, space: SearchSpace | None) -> list[str]:
    """The pre-screen's decisions with their evidence (none where the study has no stored space)."""
    if space is None:
        return []
    lines = describe_screen(record_of(study).trials, screen_for(space.engine), space.values)
    return ["pre-screen:", *(f"  {line}" for line in lines)] if lines else []


def print_best(study: StudyRecord, space: SearchSpace | None = None) -> None:
    """The noise-aware front and the knee: the same winner export, pareto and report name, and
    (with the study's ``space``) where the answer's hold passed the KV pool before any long run."""
    names = objective_metrics(study)
    items = candidates(study)
    if not items:
        echo("best: none yet (no complete, feasible trial)")
        return
    front = sorted(pareto_front(items, signs(study)), key=lambda c: c.number)
    echo(f"front (feasible, within-noise ties kept): trials {', '.join(str(c.number) for c in front)}")
    for c in front:
        echo(f"  {c.describe(names)}")
    if (unlike := unlike_hosts([c.trial for c in front])) is not None:
        echo(f"  warning: {unlike}")
    chosen = pick(study, "knee")
    echo(f"pick (knee): {chosen.describe(names)}")
    found = chosen.trial.confirmed
    label = (
        "within the SLO in the search's short windows only (NOT confirmed)" if uncorrected_failure(found) else "within the SLO"
    )
    if (load := slo_load(chosen.trial.metrics, label)) is not None:
        echo(f"  {load}")
        said = describe_confirmation(found, chosen.number) if found else ["not confirmed by a long run (tune validate --confirm)"]
        echo(f"  {said[0]}")
        if not found and space is not None and (past := hold_past_kv_pool(chosen.trial, kv_pool(space, chosen.trial))):
            echo(f"  note: {past}")
        for line in confirmation_steps(found) if found else []:
            echo(f"  {line.strip()}")
        if (moved := other_host(chosen.trial.host, found, chosen.number)) is not None:
            echo(f"  warning: {moved}")
    for line in gain_lines(study):
        echo(line)


def _held(metrics: Mapping[str, float]) -> str:
    return f"; held {metrics[SLO_HELD_S]:.0f} s" if SLO_HELD_S in metrics else ""


def slo_load(metrics: Mapping[str, float], label: str = "within the SLO") -> str | None:
    """The largest load a trial held its SLO at, as its SLO probe measured it (None: not measured),
    headed ``label``."""
    if SLO_RATE in metrics:  # open loop
        rate = metrics[SLO_RATE]
        broke = f", {metrics[SLO_RATE_VIOLATED]:.3g} break it" if SLO_RATE_VIOLATED in metrics else ""
        if SLO_RATE_CLIENT_BOUND in metrics:
            broke += f"; {metrics[SLO_RATE_CLIENT_BOUND]:.3g} could not be sent (client-bound)"
        if not rate:
            return f"{label}: no request rate" + broke
        sent = ""
        if SLO_ACHIEVED_OVER_OFFERED in metrics:
            done = f", {metrics[SLO_COMPLETION_RATE]:.3g}/s completed" if SLO_COMPLETION_RATE in metrics else ""
            sent = f"; {metrics[SLO_ACHIEVED_OVER_OFFERED]:.1%} of the schedule sent{done}"
        return f"{label}: {rate:.3g} requests/s (Poisson arrivals, open loop{sent}{_held(metrics)}){broke}"
    if SLO_CONCURRENCY not in metrics:
        return None
    n = int(metrics[SLO_CONCURRENCY])
    if not n:
        return f"{label}: no load (1 client breaks it)"
    broke = f", {metrics[SLO_CONCURRENCY_VIOLATED]:.0f} break it" if SLO_CONCURRENCY_VIOLATED in metrics else ""
    names = [name for name in ("ttft", "itl", "tpot") if f"slo.{name}_p99" in metrics]
    p99 = "/".join(f"{metrics[f'slo.{name}_p99'] * 1000:,.0f}" for name in names)
    shown = "/".join(name.upper() for name in names)
    return f"{label}: {n} concurrent client{'s' if n != 1 else ''}{broke}; {shown} p99 {p99} ms{_held(metrics)}"


def gain_lines(study: StudyRecord) -> list[str]:
    """What tuning bought: the pick against the baseline (the reference config), on fresh servers."""
    chosen, found = gains(study)
    if chosen is None:
        return []
    if not found:
        return ["what tuning bought: unknown (no baseline run on fresh servers: enqueue one, keep remeasure on)"]
    return [
        f"what tuning bought (trial {chosen.number} against the baseline, fresh servers):",
        *(f"  {g.describe()}" for g in found),
    ]


def print_noise(study: StudyRecord) -> None:
    for line in describe_noise(study):
        echo(line)
