"""`tune run --dry-run`: what a run would do, checked before a night, with no server started.

The space and its objective set are validated (as a run would), the engine is looked up without
installing it, the partitions are laid out (devices, cores, ports), the first configs are rendered
to the argv a trial would execute (enqueued configs first, then the sampler's first proposals), and
the night's length is estimated from the budget and the engine's typical start."""

from __future__ import annotations

from pathlib import Path

import optuna

from tuner import engines
from tuner.base.units import format_duration
from tuner.host.partitions import Partition, PartitionPool, make_partitions, trial_size
from tuner.objectives import ObjectiveSet
from tuner.probes import CEILING, client_cores
from tuner.space import SearchSpace, suggest, violated_constraints
from tuner.trials import enqueue
from tuner.trials.study import make_sampler

__all__ = ["dry_run", "estimate_line", "expected_line", "trial_timeout_line"]


def dry_run(
    space: SearchSpace,
    path: Path,
    objective: ObjectiveSet,
    *,
    budget: int,
    timeout: float | None,
    max_parallel: int,
    sampler: str | None = None,
    configs: int = 3,
) -> list[str]:
    """The lines a dry run prints (the space and objectives were validated by loading them)."""
    adapter = engines.get(space.engine)
    executable, found = adapter.installed()
    hw = space.hardware
    lines = [
        f"space {path}: valid ({space.engine}, {len(space.parameters)} parameters, objectives "
        f"{', '.join(objective.metric_names)})",
        f"engine: {found}",
        f"model: {adapter.shown_model(space.model.path)}",
        f"hardware: {hw.kind} devices {hw.devices}, {max_parallel} trial(s) at a time",
    ]
    if hw.kind == "gpu":
        lines.append("  (GPU cores as this machine sees them; on the GPU host each partition gets its own GPUs' cores)")
    if isinstance(hw.per_trial, int):
        lines += [f"  {p.describe()}" for p in make_partitions(hw.kind, hw.devices, hw.per_trial)[:max_parallel]]
    else:
        lines.append(f"  trial size from parameter {hw.per_trial!r}: partitions packed first-fit per trial")
    lines += space.describe_workload()
    study = optuna.create_study(directions=objective.directions, sampler=make_sampler(space, name=sampler))
    for params in space.enqueue:
        enqueue(study, params)
    shown = executable or [f"<{space.engine} executable>"]
    for _ in range(configs):
        trial = study.ask()
        params = suggest(trial, space)
        source = "enqueued" if trial.number < len(space.enqueue) else "sampled"
        partition = PartitionPool(hw.kind, hw.devices).acquire(trial_size(hw.per_trial, params))
        assert partition is not None  # validated: every trial size fits the devices
        command = adapter.command(
            params,
            space=space,
            model_path=adapter.shown_model(space.model.path),
            port=partition.port_base,
            partition=partition,
            executable=shown,
        )
        broken = violated_constraints(space, params)
        note = f", breaks {'; '.join(c.text for c in broken)}: not launched" if broken else ""
        lines += [
            f"config {trial.number} ({source}{note}) on {partition.kind} {','.join(map(str, partition.devices))}:",
            f"  {command.shell_line()}",
        ]
    lines += _open_loop_ceiling(space, partition)
    if (short := trial_timeout_line(space)) is not None:
        lines.append(short)
    lines.append(estimate_line(space, budget=budget, timeout=timeout, max_parallel=max_parallel))
    lines.append(expected_line(space, budget=budget, max_parallel=max_parallel, installed=executable is not None))
    return lines


def estimate_line(space: SearchSpace, *, budget: int, timeout: float | None, max_parallel: int) -> str:
    """A lower bound: each trial's launch and load levels, the recall ladder and other probes aside."""
    start, per_trial, most = _trial_seconds(space)
    slo = space.probes.slo
    held = f" and a hold of up to {format_duration(slo.hold_max or 0.0)}" if slo is not None and slo.hold else ""
    levels = "load levels" + (f" + at most {slo.max_levels} SLO levels{held}" if slo is not None else "")
    night = budget * per_trial / max(1, max_parallel)
    limit = f"; the space's timeout {format_duration(timeout)} stops launching first" if timeout and timeout < night else ""
    spread = f" to {format_duration(most)}" if slo is not None else ""
    return (
        f"estimate: {budget} trials x at least {format_duration(per_trial)}{spread} (start ~{start:.0f}s + {levels}; recall "
        f"and other probes add to it) / {max_parallel} at a time = at least {format_duration(night)}{limit}"
    )


def expected_line(space: SearchSpace, *, budget: int, max_parallel: int, installed: bool) -> str:
    """The expected total: every trial and every fresh-server re-measurement the space plans at
    the longest a trial's levels take, plus the engine's install where it is missing. On the
    embedded default (2026-12-03) this said 17m06s for four fresh-clone runs of 14.7-16.5 min
    (docs/data/readme-run/): it leaves the recall ladder out and takes every level at its longest."""
    most = _trial_seconds(space)[2]
    again = _remeasure_launches(space, budget)
    install = 0.0 if installed else engines.get(space.engine).typical_install_s
    expected = (budget + again) * most / max(1, max_parallel) + install
    built = f" + ~{format_duration(install)} to install the engine" if install else ""
    line = (
        f"expected: about {format_duration(expected)} ({budget} trials and {again} fresh-server re-measurement(s) at up to "
        f"{format_duration(most)} each, {max_parallel} at a time{built})"
    )
    if (deadline := space.budget.deadline) is not None:
        line += f"; it ends within {format_duration(deadline)} (budget.deadline), with fewer trials where they do not fit"
    return line


def trial_timeout_line(space: SearchSpace) -> str | None:
    """A note where ``budget.trial_timeout`` is shorter than the longest trial the space plans:
    its start, every load and SLO level, and every hold the SLO search may run (``holds``: the
    level above the answer is held too where it broke in a short window), at their longest; the
    recall ladder left out. None where it fits or there is no limit."""
    limit, slo = space.budget.trial_timeout, space.probes.slo
    holds = slo.holds if slo is not None and _hold_seconds(space) else 0
    start, _, longest = _trial_seconds(space, holds=holds)
    if limit is None or limit >= longest:
        return None
    held = f", {holds} holds of up to {format_duration(_hold_seconds(space))}" if holds else ""
    levels = f", {slo.max_levels} SLO levels" if slo is not None else ""
    return (
        f"note: budget.trial_timeout {format_duration(limit)} is shorter than the longest trial this space plans "
        f"(~{format_duration(longest)}: start ~{start:.0f}s, load levels{levels}{held}): the SLO search runs only the "
        "levels and holds that end before it and says what it left out; a trial still running at the limit is cut "
        "there and recorded as timed out, with its evidence"
    )


def _hold_seconds(space: SearchSpace) -> float:
    """One SLO hold at its longest (0: none)."""
    slo = space.probes.slo
    return (slo.hold_max or slo.hold or 0.0) if slo is not None else 0.0


def _trial_seconds(space: SearchSpace, *, holds: int = 1) -> tuple[float, float, float]:
    """(a start, a trial's start and load levels, that plus every SLO level and ``holds`` holds
    at their longest: the answer's alone by default) in seconds."""
    start = engines.get(space.engine).typical_start_s
    load, slo = space.probes.load, space.probes.slo
    level = (load.max_duration + 5.0) if load is not None else 20.0
    per_trial = start + (len(load.concurrency) * level if load is not None else 0.0)
    return start, per_trial, per_trial + (slo.max_levels * level + holds * _hold_seconds(space) if slo is not None else 0.0)


def launch_seconds(space: SearchSpace) -> float:
    """A trial's (or a fresh-server run's) longest planned length: its start, every load and SLO
    level and the hold at their longest (the recall ladder left out)."""
    return _trial_seconds(space)[2]


def end_launches(space: SearchSpace, budget: int) -> int:
    """The fresh-server runs the re-measurement plans after the search: the front's top
    candidates and the reference, ``repeats`` each."""
    plan = space.remeasure
    if not plan.enabled:
        return 0
    top, repeats = plan.plan(budget, plan.top)
    return (top + 1) * repeats if top else 0


def _remeasure_launches(space: SearchSpace, budget: int) -> int:
    """The fresh-server runs the space's re-measurement plans: the reference before the search and
    at each pause, the front's top candidates and the reference again at the end."""
    plan = space.remeasure
    if not plan.enabled:
        return 0
    return plan.reference_runs + len(plan.pauses(budget)) + end_launches(space, budget)


def _open_loop_ceiling(space: SearchSpace, partition: Partition | None) -> list[str]:
    """For an open-loop SLO search: what the client cores a trial's probe runs on can send (the
    measured per-core ceiling, tuner.probes.CEILING), against the rates the search may ask."""
    slo, load = space.probes.slo, space.probes.load
    if slo is None or slo.mode != "rate" or load is None:
        return []
    client = partition.client_cpus if partition is not None else ()
    cores = len(client) or client_cores()
    where = "its partition's client cores" if client else "the cores this process may use"
    per_core = CEILING.rate(load.output_tokens)
    asked = f"up to max_rate {slo.max_rate:g}/s" if slo.max_rate else f"from {slo.start_rate:g}/s doubling, no max_rate"
    return [
        f"open loop: one client core sends about {per_core:.0f} requests/s of {load.output_tokens}-token streams "
        f"(docs/measurements.md); {cores} core(s) ({where}): about {cores * per_core:.0f}/s; the search asks {asked}; "
        "a level the senders cannot deliver is recorded client-bound, never the answer"
    ]
