"""Mooncake-format traces: read (every problem one line naming the file and line) and described.

A line is one request: ``timestamp`` (ms from the trace's start), ``input_length`` and
``output_length`` (tokens), ``hash_ids`` (one id per ``block`` tokens of the prompt, in order;
the same id, the same tokens: a prefix an engine's cache may hold). Mooncake's ids chain (a
block's id stands for everything before it too), so the tokens a cache of unlimited size could
serve are those of a request's leading blocks already seen in an earlier request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tuner.base.exceptions import ConfigError
from tuner.base.stats import percentiles

__all__ = ["TraceError", "TraceRow", "read_trace", "reusable", "trace_stats"]


class TraceError(ConfigError):
    """A trace that cannot be replayed: ``FILE:LINE: what``."""


@dataclass(frozen=True)
class TraceRow:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def read_trace(path: str | Path, block: int = 512) -> tuple[TraceRow, ...]:
    """The trace's rows, checked: each line a JSON object with the four fields, lengths positive,
    timestamps in order, no more hash ids than the prompt has blocks."""
    file = Path(path)
    try:
        stamp = file.stat().st_mtime_ns
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror})") from None
    return _read(str(file), stamp, block)


@lru_cache(maxsize=8)
def _read(path: str, _mtime: int, block: int) -> tuple[TraceRow, ...]:
    rows: list[TraceRow] = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            rows.append(_row(path, number, line, block, rows[-1].timestamp_ms if rows else None))
    if not rows:
        raise TraceError(f"{path}: the trace is empty (no request lines)")
    return tuple(rows)


def _row(path: str, number: int, line: str, block: int, before: float | None) -> TraceRow:
    where = f"{path}:{number}"
    try:
        raw: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: not a JSON object ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise TraceError(f"{where}: not a JSON object")
    for key in ("timestamp", "input_length", "output_length", "hash_ids"):
        if key not in raw:
            raise TraceError(f"{where}: no {key!r} (a Mooncake trace line has timestamp, input_length, output_length, hash_ids)")
    stamp, prompt, output, ids = raw["timestamp"], raw["input_length"], raw["output_length"], raw["hash_ids"]
    if not _number(stamp) or stamp < 0:
        raise TraceError(f"{where}: timestamp {stamp!r} is not a time in ms (a number >= 0)")
    for key, value in (("input_length", prompt), ("output_length", output)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TraceError(f"{where}: {key} {value!r} is not a positive whole number of tokens")
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise TraceError(f"{where}: hash_ids must be a list of whole numbers")
    if len(ids) > math.ceil(prompt / block):
        raise TraceError(f"{where}: {len(ids)} hash_ids for {prompt} tokens: more blocks of {block} than the prompt has")
    if before is not None and stamp < before:
        raise TraceError(f"{where}: timestamp {stamp} is before the previous line's {before:g}: a trace is in time order")
    return TraceRow(float(stamp), prompt, output, tuple(ids))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def reusable(rows: Sequence[TraceRow], block: int = 512) -> list[int]:
    """Per row, the prompt tokens a cache of unlimited size could serve: its leading blocks whose
    ids an earlier row sent (the chain stops at the first new id)."""
    seen: set[int] = set()
    found = []
    for row in rows:
        lead = 0
        for h in row.hash_ids:
            if h not in seen:
                break
            lead += 1
        found.append(min(row.input_length, lead * block))
        seen.update(row.hash_ids)
    return found


def trace_stats(rows: Sequence[TraceRow], block: int = 512) -> dict[str, Any]:
    """What a trace holds: requests, span and rate, prompt and output length percentiles, and the
    share of prompt tokens a cache could serve (:func:`reusable`)."""
    span = (rows[-1].timestamp_ms - rows[0].timestamp_ms) / 1000
    prompts = [float(r.input_length) for r in rows]
    outputs = [float(r.output_length) for r in rows]
    reuse = reusable(rows, block)
    return {
        "requests": len(rows),
        "span_s": span,
        "rate": (len(rows) - 1) / span if span > 0 else None,
        "prompt_tokens": sum(r.input_length for r in rows),
        "output_tokens": sum(r.output_length for r in rows),
        "prompt": {"mean": sum(prompts) / len(prompts), **{f"p{p}": v for p, v in percentiles(prompts, (50, 90, 99)).items()}},
        "output": {"mean": sum(outputs) / len(outputs), **{f"p{p}": v for p, v in percentiles(outputs, (50, 90, 99)).items()}},
        "reusable_tokens": sum(reuse),
        "reusable_share": sum(reuse) / sum(r.input_length for r in rows),
        "blocks": len({h for r in rows for h in r.hash_ids}),
    }
