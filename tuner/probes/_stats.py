"""Percentiles without numpy: linear interpolation between closest ranks (numpy's default)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["percentiles"]


def percentiles(values: Sequence[float], pcts: Iterable[int]) -> dict[int, float | None]:
    ordered = sorted(values)
    return {p: _interpolate(ordered, p) for p in pcts}


def _interpolate(ordered: list[float], pct: float) -> float | None:
    if not ordered:
        return None
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
