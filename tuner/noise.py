"""A study's measurement noise, and what it means for comparing two configs.

Two sources of noise are kept apart:

- within a server: the load probe's batch-means CI of output tok/s (``load.output_tok_s_ci``);
- between fresh servers of the same config: the study's *noise floor*, the pooled relative
  standard deviation of every config the study measured more than once (its reference config
  at the start and end of a run, and the front candidates re-measured at the end).

A value's 95 % half-width combines both; two values differ only when their difference exceeds
the combined half-width (:func:`differs`), else they are a tie. Only load metrics are noisy:
recall-verified context and capacity come from the engine and the needle ladder, exactly.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.probes._window import t975

__all__ = ["NoiseFloor", "differs", "half_width", "is_noisy", "noise_floor"]

Z95 = 1.959964
NOISE = "noise"  # study user attribute: {"reference": params, "runs": {label: [[values...], ...]}, ...}


def is_noisy(metric: str) -> bool:
    return metric.startswith("load.")


@dataclass(frozen=True)
class NoiseFloor:
    """Relative standard deviation between fresh servers, per objective, and its degrees of freedom."""

    relative_sd: tuple[float, ...]
    dof: int

    @property
    def known(self) -> bool:
        return self.dof > 0


def noise_floor(repeated: Sequence[Sequence[Sequence[float]]], noisy: Sequence[bool]) -> NoiseFloor:
    """Pooled relative SD per objective over configs measured more than once.

    ``repeated``: per config, its runs' objective values."""
    width = len(noisy)
    num, dof = [0.0] * width, 0
    for runs in repeated:
        if len(runs) < 2:
            continue
        dof += len(runs) - 1
        for j in range(width):
            column = [r[j] for r in runs]
            mean = statistics.fmean(column)
            if noisy[j] and mean:
                num[j] += (len(runs) - 1) * (statistics.stdev(column) / mean) ** 2
    return NoiseFloor(tuple(math.sqrt(n / dof) if dof else 0.0 for n in num), dof)


def half_width(
    values: Sequence[float],
    runs: Sequence[Sequence[float]],
    floor: NoiseFloor,
    noisy: Sequence[bool],
    within: Mapping[int, float] | None = None,
) -> tuple[float, ...]:
    """95 % half-width per objective of a config measured ``len(runs)`` times (mean ``values``).

    One run: the probe's own CI (``within``: objective index -> half-width) combined with the
    floor. Several runs: Student-t over the runs, the SD never below the floor."""
    within = within or {}
    k = max(1, len(runs))
    result = []
    for j, value in enumerate(values):
        if not noisy[j]:
            result.append(0.0)
            continue
        floor_sd = floor.relative_sd[j] * abs(value) if floor.known else 0.0
        if k == 1:
            result.append(math.hypot(within.get(j, 0.0), Z95 * floor_sd))
            continue
        sd = max(statistics.stdev(r[j] for r in runs), floor_sd)
        dof = k - 1 + (floor.dof if floor.known else 0)
        result.append(t975(dof) * sd / math.sqrt(k))
    return tuple(result)


def differs(a: float, ha: float, b: float, hb: float) -> bool:
    """True when ``a`` and ``b`` differ by more than their combined 95 % half-widths."""
    return abs(a - b) > math.hypot(ha, hb)
