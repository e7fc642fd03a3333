"""Helpers shared by the adapters' capacity readers: last-occurrence matching and reconciliation."""

from __future__ import annotations

import re
from typing import Any

from tuner.base.records import Capacity

__all__ = ["last_int", "reconcile", "to_int"]

_FIELDS = ("kv_tokens", "max_running_requests", "context_per_request")


def to_int(text: str) -> int:
    """``"908,560"`` -> 908560 (engines print thousands separators)."""
    return int(float(text.replace(",", "").replace("_", "")))


def last_int(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The LAST match of ``pattern`` in ``text``: engines may log provisional values first."""
    matches = list(pattern.finditer(text))
    return matches[-1] if matches else None


def reconcile(sources: dict[str, dict[str, Any]]) -> Capacity:
    """One Capacity from several sources; the first source holding a field wins, and any
    source that disagrees on that field is named in ``disagreements``."""
    chosen: dict[str, int | None] = dict.fromkeys(_FIELDS)
    disagreements = []
    for name in _FIELDS:
        seen = [(src, int(vals[name])) for src, vals in sources.items() if vals.get(name) is not None]
        if not seen:
            continue
        chosen[name] = seen[0][1]
        for src, value in seen[1:]:
            if value != seen[0][1]:
                disagreements.append(f"{name}: {seen[0][0]} says {seen[0][1]}, {src} says {value}")
    return Capacity(**chosen, sources=sources, disagreements=tuple(disagreements))
