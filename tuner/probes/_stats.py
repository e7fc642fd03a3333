"""Percentiles: numpy's (linear interpolation between closest ranks); None for no samples."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["percentiles"]


def percentiles(values: Sequence[float], pcts: Iterable[int]) -> dict[int, float | None]:
    pcts = list(pcts)
    if not len(values):
        return {p: None for p in pcts}
    found = np.percentile(np.asarray(values, dtype=float), pcts)
    return {p: float(v) for p, v in zip(pcts, found, strict=True)}
