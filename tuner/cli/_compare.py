"""`tune compare`: the picks of several studies, re-measured side by side on fresh servers."""

from __future__ import annotations

import typer

from tuner.app.read import read_record, stored_objective_set, stored_space
from tuner.base.artifacts import RunDir
from tuner.base.exceptions import ConfigError
from tuner.cli._common import echo
from tuner.launching.executors import InlineExecutor
from tuner.orchestration.compare import compare as compare_picks


def compare(
    studies: list[str] = typer.Option(..., "--study", help="study name, or NAME=STORAGE_URL; two or more"),
    storage: str = typer.Option(
        None, "--storage", help="Optuna storage URL of the studies given by name (default: runs/<study>/study.db)"
    ),
    repeats: int = typer.Option(3, "--repeats", min=1, help="fresh servers per pick, interleaved"),
    how: str = typer.Option("knee", "--pick", help="knee | max-throughput | max-context"),
) -> None:
    """Do two tunes agree? Each study's pick on fresh servers, interleaved, in one run: differs or ties."""
    if len(studies) < 2:
        raise ConfigError("--study: give two or more studies to compare")
    opened = {spec.split("=", 1)[0]: read_record(spec.split("=", 1)[0], spec if "=" in spec else storage) for spec in studies}
    first = next(iter(opened.values()))
    space = stored_space(first)
    objective = stored_objective_set(first)
    run_dir = RunDir.for_study("compare-" + "-".join(opened))
    results, floor, verdicts = compare_picks(
        opened,
        space,
        objective,
        run_dir,
        InlineExecutor(),
        repeats=repeats,
        how=how,
        on_run=lambda label, r, text: echo(f"{label} run {r + 1}/{repeats}: {text}"),
    )
    names = list(objective.metric_names)
    echo(
        f"\nnoise floor: {floor.relative_sd[0]:.1%} relative SD of {names[0]} ({floor.dof} degrees of freedom)"
        if floor.known
        else "\nnoise floor: unknown"
    )
    for r in results:
        values = (
            ", ".join(f"{n} {m:,.1f} +- {h:,.1f}" for n, m, h in zip(names, r.mean, r.half_width, strict=True))
            or "every run failed"
        )
        echo(f"{r.study}: trial {r.candidate.number} {r.candidate.trial.params}: {values} ({len(r.runs)} runs)")
        if r.aside is not None:
            echo(
                f"set aside: {r.study}'s run {r.aside.index + 1}, {r.aside.describe()}: a disturbed measurement "
                "(a busy machine?), kept out of its mean and the floor"
            )
    for line in verdicts:
        echo(line)
    echo(f"evidence: {run_dir.root}/validate/")
