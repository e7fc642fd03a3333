"""The host a figure was measured on: its CPU, GPUs, driver, and how fast one of its cores runs Python.

An answer does not carry between hosts. The same SGLang config at the same 30 requests/s, with the
same load client, had ITL p99 35 ms on one H100 host and 10-12 ms on another (a small model's
decode step is set by the engine's scheduler, one Python thread, more than by the GPU:
docs/goodput.md). So every trial and every confirmation stores the host it ran on, and a pick
searched on one host and confirmed on another says so (:func:`apart`).

The speed figure is a calibration, not a benchmark: the least time of a few runs of one fixed
pure-Python loop on the partition's server cores before its server starts (the least, as
``timeit`` takes it: what the core does when nothing else gets in the way), ~10 ms a run on a
current x86 core. Two hosts whose figures differ by more than :data:`SPEED_RATIO` run a
CPU-bound engine at different speeds, whatever their CPU model strings say.

The calibration is a moment of the host, though, not the host: on one H100 machine (2026-12-07,
one lease) it read 25.9 and 26.9 ms in the first ten minutes and 15.1 and 16.1 ms twenty minutes
later, while the engine's own decode steps stayed put (1.68 and 1.65 ms a step at <= 8 running).
Every lent machine there is named ``vm``, so neither name nor calibration told one machine from
another. The GPUs' UUIDs do (one per physical card): two fingerprints with the same cards are the
same machine, and their calibrations are not compared; different cards on hosts that ``names``
tells apart are named as such.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tuner.host.cores import pinned
from tuner.host.devices import gpu_names, gpu_uuids

__all__ = ["HOST_FILE", "SPEED_RATIO", "HostFingerprint", "apart", "calibrate", "this_host"]

logger = logging.getLogger(__name__)

SPEED_RATIO = 1.25  # calibrations further apart than this: hosts of different speed (same-host runs: within ~10 %)
LOOP_N = 100_000  # iterations of the calibration loop
REPEATS = 5
HOST_FILE = "host.json"  # in a trial's folder: what it ran on, written before its server starts


@dataclass(frozen=True)
class HostFingerprint:
    """What a figure was measured on (stored with each trial and each confirmation)."""

    name: str
    cpu: str
    cpus: int  # logical CPUs of the host
    gpus: tuple[str, ...] = ()  # the partition's GPUs, by product name
    driver: str | None = None
    loop_ms: float | None = None  # the calibration: least time of the fixed Python loop on the server's cores
    cores: tuple[int, ...] = field(default=())  # where the calibration ran
    gpu_ids: tuple[str, ...] = field(default=())  # the partition's GPUs by UUID: the same cards, the same machine

    def __post_init__(self) -> None:  # lists (as to_dict writes them) compare unequal to tuples: keep tuples
        for name in ("gpus", "cores", "gpu_ids"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def describe(self) -> str:
        parts = [self.cpu, f"{self.cpus} CPUs"]
        if self.gpus:
            kinds = sorted(set(self.gpus))
            parts.append(", ".join(f"{self.gpus.count(g)} x {g}" for g in kinds))
        if self.driver:
            parts.append(f"driver {self.driver}")
        if self.loop_ms is not None:
            parts.append(f"Python loop {self.loop_ms:.1f} ms")
        return f"{self.name} ({'; '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"], data["cores"], data["gpu_ids"] = list(self.gpus), list(self.cores), list(self.gpu_ids)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> HostFingerprint | None:
        """The stored fingerprint; None where none was stored (a study from before 2026-12-06) or it is unreadable."""
        if not isinstance(data, Mapping) or not data:
            return None
        try:
            return cls(
                name=str(data["name"]),
                cpu=str(data["cpu"]),
                cpus=int(data["cpus"]),
                gpus=tuple(str(g) for g in data.get("gpus") or ()),
                driver=data.get("driver"),
                loop_ms=float(data["loop_ms"]) if data.get("loop_ms") is not None else None,
                cores=tuple(int(c) for c in data.get("cores") or ()),
                gpu_ids=tuple(str(u) for u in data.get("gpu_ids") or ()),
            )
        except (KeyError, TypeError, ValueError):
            logger.warning("a stored host fingerprint is unreadable: %r", data)
            return None


def apart(first: HostFingerprint, second: HostFingerprint, *, names: bool = True) -> list[str]:
    """How two hosts differ in what sets an engine's speed (empty: the same host, or alike):
    the host itself (``names``: a cluster's nodes of one kind are alike though named and carded
    apart) by its name or its GPUs' UUIDs, its CPU or GPU model, its driver, its calibration beyond
    :data:`SPEED_RATIO` (not between two fingerprints of the same cards: one machine's calibration
    moves with what else runs on it)."""
    found = []
    if names and first.name != second.name:
        found.append(f"host {first.name} vs {second.name}")
    same_cards = bool(first.gpu_ids) and first.gpu_ids == second.gpu_ids
    if names and first.gpu_ids and second.gpu_ids and not same_cards:
        found.append(f"another machine (GPU {_cards(first.gpu_ids)} vs {_cards(second.gpu_ids)})")
    if first.cpu != second.cpu:
        found.append(f"CPU {first.cpu} vs {second.cpu}")
    if first.gpus != second.gpus:
        found.append(f"GPUs {', '.join(first.gpus) or 'none'} vs {', '.join(second.gpus) or 'none'}")
    if first.driver != second.driver and first.driver and second.driver:
        found.append(f"driver {first.driver} vs {second.driver}")
    if first.loop_ms and second.loop_ms and not same_cards:
        ratio = second.loop_ms / first.loop_ms
        if max(ratio, 1 / ratio) > SPEED_RATIO:
            found.append(f"a core's Python speed {first.loop_ms:.1f} vs {second.loop_ms:.1f} ms a loop ({1 / ratio:.2f} x)")
    return found


def _cards(uuids: Sequence[str]) -> str:
    """GPU UUIDs shortened to what tells them apart in a line (GPU-3f2a9c1e...)."""
    return ", ".join(u[:12] + "..." if len(u) > 12 else u for u in uuids)


def _loop(n: int) -> int:
    """The calibration's work: dict, arithmetic and branches, as an engine's scheduler does."""
    seen: dict[int, int] = {}
    total = 0
    for i in range(n):
        seen[i & 1023] = i
        key = (i * 7) & 1023
        total += seen[key] if key in seen else i
    return total


def calibrate(
    cores: Sequence[int] = (), *, n: int = LOOP_N, repeats: int = REPEATS, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The least time in ms of ``repeats`` runs of the fixed loop, pinned to ``cores`` (none: where this runs)."""
    best = float("inf")
    with pinned(tuple(cores)):
        for _ in range(repeats):
            began = clock()
            _loop(n)
            best = min(best, clock() - began)
    return best * 1000


def _cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (/proc/cpuinfo: x86's "model name", Arm's "Model name" or "CPU part"), else the platform's."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("model name", "cpu model", "hardware") and value.strip():
            return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown CPU"


def this_host(devices: Sequence[int] = (), cores: Sequence[int] = (), *, calibration: bool = True) -> HostFingerprint:
    """The host this runs on, with ``devices`` (GPU indices) named and the calibration run on ``cores``."""
    named = gpu_names(devices) if devices else None
    gpus, driver = named if named is not None else ((), None)
    return HostFingerprint(
        name=socket.gethostname(),
        cpu=_cpu_model(),
        cpus=os.cpu_count() or 0,
        gpus=gpus,
        driver=driver,
        loop_ms=round(calibrate(cores), 2) if calibration else None,
        cores=tuple(cores),
        gpu_ids=(gpu_uuids(devices) or ()) if devices else (),
    )
