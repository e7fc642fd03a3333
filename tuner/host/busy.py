"""Cores that other work keeps busy before a run starts.

A server thread on a core that another process saturates runs at a fraction of its speed, and an
engine whose threads wait for each other at every step runs at the speed of its slowest thread: on
2 cores with a busy loop pinned to one, llama-server at ``--threads 2`` served 0.4 tok/s where the
idle machine gave about 46 (docs/data/readme-run/README.md). A run that measures on such a core
says so before its first trial, so that its figures are not taken for the config's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from tuner.host import procfs

__all__ = ["BUSY_SHARE", "busy_cores", "describe"]

BUSY_SHARE = 0.5  # a core busier than this with work not ours is worth a warning


def busy_cores(
    cores: Iterable[int],
    seconds: float = 1.0,
    *,
    ticks: Callable[[], dict[int, tuple[int, int]]] = procfs.core_ticks,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, float]:
    """The share of each of ``cores`` busy over ``seconds`` (0 to 1), for those /proc/stat counted
    in that time; the caller sleeps meanwhile, so what it sees is other processes' work."""
    before = ticks()
    sleep(seconds)
    after = ticks()
    shares = {}
    for core in cores:
        if core in before and core in after and (total := after[core][1] - before[core][1]) > 0:
            shares[core] = min(1.0, max(0.0, (after[core][0] - before[core][0]) / total))
    return shares


def describe(shares: dict[int, float], threshold: float = BUSY_SHARE) -> str | None:
    """One warning line naming the cores busier than ``threshold``, or None when there is none."""
    busy = {core: share for core, share in sorted(shares.items()) if share > threshold}
    if not busy:
        return None
    named = ", ".join(f"core {core} {share:.0%}" for core, share in busy.items())
    return (
        f"warning: busy before any trial started ({named}, other processes' work): a server or client thread there runs "
        "at a fraction of its speed, so this run's figures are this machine's load as much as the config's"
    )
