"""`tune limits`: what a config holds — configured limits, runtime-derived ones, and the
concurrency each context length allows. From a trial, a saved log, or what-if numbers."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tuner import engines
from tuner.app.read import read_record, stored_space
from tuner.base.exceptions import ConfigError
from tuner.cli._common import echo
from tuner.results.limits import Limits, default_contexts, for_trial, from_config


def limits(
    study: str = typer.Option(None, "--study", help="study name (with --trial)"),
    trial: int = typer.Option(None, "--trial", help="trial number (with --study)"),
    storage: str = typer.Option(None, "--storage", help="Optuna storage URL (default: runs/<study>/study.db)"),
    engine: str = typer.Option(None, "--engine", "-e", help="engine of --log"),
    log: Path = typer.Option(None, "--log", help="a saved server log (with --engine)"),
    kv_tokens: int = typer.Option(None, "--kv-tokens", help="what-if: KV pool tokens"),
    max_running_requests: int = typer.Option(None, "--max-running-requests", help="what-if: max running requests"),
    context_per_request: int = typer.Option(None, "--context-per-request", help="what-if: per-call context"),
    cuda_graph_max_bs: int = typer.Option(None, "--cuda-graph-max-bs", help="what-if: CUDA graph max batch"),
    chunked_prefill_size: int = typer.Option(None, "--chunked-prefill-size", help="what-if: chunked prefill size"),
    max_prefill_tokens: int = typer.Option(None, "--max-prefill-tokens", help="what-if: max prefill tokens"),
    max_queued_requests: int = typer.Option(None, "--max-queued-requests", help="what-if: queue bound"),
    contexts: str = typer.Option(None, "--contexts", help="comma-separated context lengths, e.g. 524288,131072"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Show parallel calls, total and per-call context a config holds."""
    what_if = {
        "kv_tokens": kv_tokens,
        "max_running_requests": max_running_requests,
        "context_per_request": context_per_request,
        "cuda_graph_max_bs": cuda_graph_max_bs,
        "chunked_prefill_size": chunked_prefill_size,
        "max_prefill_tokens": max_prefill_tokens,
        "max_queued_requests": max_queued_requests,
    }
    for name, value in what_if.items():
        if value is not None and (value < 0 or (value == 0 and name != "max_queued_requests")):
            raise ConfigError(f"--{name.replace('_', '-')}: needs a positive number, got {value}")
    if study is not None or trial is not None:
        result = _from_trial(study, trial, storage)
    elif log is not None or engine is not None:
        result = _from_log(engine, log)
    elif any(v is not None for v in what_if.values()):
        result = from_config(what_if, source="what-if")
    else:
        raise ConfigError("tune limits needs --study/--trial, --engine/--log, or what-if numbers such as --kv-tokens")
    overrides = {k: v for k, v in what_if.items() if v is not None}
    if overrides and (study is not None or log is not None):
        result = from_config({**_plain(result), **overrides}, source="what-if")
    lengths = _contexts(contexts) if contexts else default_contexts(result)
    echo(json.dumps(result.to_dict(lengths), indent=2) if as_json else result.render(lengths))


def _plain(limits: Limits) -> dict[str, int | None]:
    return {k: getattr(limits, k) for k in Limits.__dataclass_fields__ if k != "sources"}


def _contexts(text: str) -> list[int]:
    try:
        values = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"--contexts: {text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"--contexts: {text!r} needs positive lengths")
    return values


def _from_log(engine: str | None, log: Path | None) -> Limits:
    if engine is None or log is None:
        raise ConfigError("--engine and --log go together")
    adapter = engines.get(engine)
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"{log}: cannot read log: {exc.strerror}") from None
    capacity = adapter.capacity(text, None, None)
    if not capacity.sources:
        raise ConfigError(f"{log}: no {engine} capacity lines found")
    return from_config({}, capacity)


def _from_trial(study: str | None, number: int | None, storage: str | None) -> Limits:
    if study is None or number is None:
        raise ConfigError("--study and --trial go together")
    record = read_record(study, storage)
    t = record.trial(number)
    if t is None:
        raise ConfigError(f"study {study!r} has no trial {number}")
    space = stored_space(record)
    configured = engines.get(space.engine).configured_limits(space.values(t.params))
    return for_trial(configured, t)
