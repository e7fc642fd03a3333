"""Trials as a table (pandas): the CSV beside each study and `tune status`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from tuner.base.metrics import (
    CAPACITY_CONTEXT_PER_REQUEST,
    LOAD_OUTPUT_TOK_S,
    LOAD_TTFT_P99,
    RECALL_EFFECTIVE_CONTEXT,
    TELEMETRY_POWER_W,
    TELEMETRY_TOKENS_PER_JOULE,
)
from tuner.trials import Studied, TrialRecord, read_trials, record_of

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["format_param", "launched", "summary_rows", "trials_frame", "write_trials_csv"]

_METRICS = (LOAD_OUTPUT_TOK_S, RECALL_EFFECTIVE_CONTEXT, CAPACITY_CONTEXT_PER_REQUEST, LOAD_TTFT_P99)
_WHEN_MEASURED = (TELEMETRY_POWER_W, TELEMETRY_TOKENS_PER_JOULE)  # columns only where a trial has them


def launched(t: TrialRecord | optuna.trial.FrozenTrial) -> datetime | None:
    """When the trial got its partition and its server was started (Optuna's ``datetime_start``
    is when it was asked: a tp-1 trial asked while a tp-2 trial holds both GPUs waits for them),
    from the launch record, else its timings; None where it was never launched."""
    return (t if isinstance(t, TrialRecord) else TrialRecord.of(t)).launched_when


def trials_frame(study: optuna.Study, *, every_metric: bool = False) -> pd.DataFrame:
    """One row per trial; ``every_metric``: also every metric a trial stored (per level, latency
    percentiles, telemetry), its timings and start/end datetimes (``tune trials``)."""
    import pandas as pd  # here, not at the top: every `tune` command imports this module, few need pandas (~0.4 CPU-s)

    rows = [_row(study, t, every_metric) for t in read_trials(study)]
    return pd.DataFrame(rows)


def _row(study: optuna.Study, t: TrialRecord, every_metric: bool = False) -> dict[str, Any]:
    metrics = t.metrics
    timings = t.timings
    row: dict[str, Any] = {"number": t.number, "state": t.state.name}
    row.update({f"param.{k}": v for k, v in t.params.items()})
    names = study.metric_names or [f"value{i}" for i in range(len(study.directions))]
    for name, value in zip(names, t.values or [None] * len(names), strict=False):
        row[name] = value
    row.update({m: metrics.get(m) for m in _METRICS if m not in row})
    row.update({m: metrics[m] for m in _WHEN_MEASURED if m in metrics and m not in row})
    row["startup_s"] = timings.get("startup_s") or (t.evidence or {}).get("elapsed_s")
    row["probe_s"] = timings.get("probe_s")
    row["feasible"] = t.feasible if t.constraints else None
    row["signature"] = t.signature
    row["note"] = t.invalid_combination or t.error
    row["duration_s"] = t.duration.total_seconds() if t.duration else None
    if every_metric:
        row.update({m: v for m, v in sorted(metrics.items()) if m not in row})
        row.update({f"timing.{k}": v for k, v in timings.items()})
        row["partition"] = ",".join(map(str, t.partition)) or None
        row["launched_at"] = at.isoformat() if (at := launched(t)) else None
        row["datetime_start"] = t.datetime_start.isoformat() if t.datetime_start else None
        row["datetime_complete"] = t.datetime_complete.isoformat() if t.datetime_complete else None
    return row


def write_trials_csv(study: optuna.Study, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    trials_frame(study).to_csv(path, index=False)


def format_param(value: Any, spec: Any = None) -> str:
    """A parameter value at the precision its space implies: a float's step, three significant
    digits on a log scale (or without a step), never 0.02024290300148292."""
    if not isinstance(value, float):
        return "" if value is None else str(value)
    step = getattr(spec, "step", None)
    if step and not getattr(spec, "log", False):
        text = repr(float(step))
        decimals = 0 if float(step).is_integer() or "e" in text else len(text.split(".")[1].rstrip("0"))
        return f"{value:.{decimals}f}"
    return f"{value:.3g}"


def summary_rows(study: Studied, space: Any = None) -> list[dict[str, Any]]:
    """The trials as a terminal shows them: number, state, every parameter at its precision, each
    objective with its probe CI where measured, feasibility and a short note (``tune trials`` has
    every column)."""
    record = record_of(study)
    names = record.metric_names or [f"value{i}" for i in range(len(record.directions))]
    specs = getattr(space, "parameters", {}) or {}
    rows = []
    for t in record.trials:
        metrics = t.metrics
        row: dict[str, Any] = {"#": t.number, "state": t.state.name}
        row.update({k: format_param(v, specs.get(k)) for k, v in t.params.items()})
        for name, value in zip(names, t.values or [None] * len(names), strict=False):
            ci = metrics.get(f"{name}_ci")
            row[name] = (
                "" if value is None else f"{value:,.1f}" + (f" +-{ci:,.1f}" if ci and ci < 10 else f" +-{ci:,.0f}" if ci else "")
            )
        row["ok"] = ("yes" if t.feasible else "no") if t.constraints else ""
        row["note"] = t.note
        rows.append(row)
    return rows
