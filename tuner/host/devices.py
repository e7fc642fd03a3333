"""GPU hygiene (NVML through nvidia-ml-py where installed): before a trial, no process may hold
memory on its partition's GPUs (a leftover server of another run, or anyone's job): such a
partition is refused, naming the holders' pids; after a trial, the devices' memory must be back
near the baseline seen at start. A partition that does not recover is quarantined: no further
trial lands on it."""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["GpuHygiene", "Holder", "gpu_names", "gpu_uuids", "nvml_holders", "nvml_used_mib"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


def _nvml(query: Callable[[Any], T], fallback: Callable[[], T | None]) -> T | None:
    """``query(pynvml)`` between nvmlInit and nvmlShutdown; ``fallback()`` (nvidia-smi) where the
    Python binding is not installed; None where NVML does not start."""
    try:
        import pynvml
    except ImportError:
        return fallback()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return query(pynvml)
    finally:
        pynvml.nvmlShutdown()


def nvml_used_mib(ids: Iterable[int]) -> dict[int, float] | None:
    """Used memory per GPU in MiB, or None where NVML is not available (nvidia-smi where the
    Python binding is not installed)."""
    ids = list(ids)
    return _nvml(
        lambda nvml: {i: nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).used / 2**20 for i in ids},
        lambda: _smi_used_mib(ids),
    )


def gpu_names(ids: Iterable[int]) -> tuple[tuple[str, ...], str | None] | None:
    """The GPUs' product names and the driver's version, or None where NVML is not available."""
    ids = list(ids)

    def query(nvml: Any) -> tuple[tuple[str, ...], str | None]:
        def text(value: Any) -> str:
            return value.decode() if isinstance(value, bytes) else str(value)

        names = tuple(text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in ids)
        return names, text(nvml.nvmlSystemGetDriverVersion())

    return _nvml(query, lambda: _smi_names(ids))


def gpu_uuids(ids: Iterable[int]) -> tuple[str, ...] | None:
    """The GPUs' UUIDs (one per physical card: the same UUIDs, the same machine), or None where
    NVML is not available."""
    ids = list(ids)

    def query(nvml: Any) -> tuple[str, ...]:
        found = (nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in ids)
        return tuple(u.decode() if isinstance(u, bytes) else str(u) for u in found)

    return _nvml(query, lambda: _smi_uuids(ids))


@dataclass(frozen=True)
class Holder:
    """A process holding memory on a GPU (pid as NVML sees it: the host's pid namespace)."""

    device: int
    pid: int
    used_mib: float | None

    def describe(self) -> str:
        used = f" {self.used_mib:.0f} MiB" if self.used_mib is not None else ""
        return f"GPU {self.device}: pid {self.pid}{used}"


def nvml_holders(ids: Iterable[int]) -> list[Holder] | None:
    """Processes with a context on any of the GPUs (compute and graphics), or None without NVML."""
    ids = list(ids)

    def query(nvml: Any) -> list[Holder]:
        found: dict[tuple[int, int], Holder] = {}
        for i in ids:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            for running in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
                for proc in running(handle):
                    used = getattr(proc, "usedGpuMemory", None)
                    found[(i, proc.pid)] = Holder(i, proc.pid, used / 2**20 if isinstance(used, int) else None)
        return list(found.values())

    return _nvml(query, lambda: _smi_holders(ids))


def _smi(args: list[str]) -> list[list[str]] | None:
    """Rows of an ``nvidia-smi --query-...`` CSV, or None without nvidia-smi."""
    try:
        done = subprocess.run(["nvidia-smi", *args, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def _smi_used_mib(ids: list[int]) -> dict[int, float] | None:
    rows = _smi(["--query-gpu=index,memory.used"])
    if rows is None:
        return None
    return {int(r[0]): float(r[1]) for r in rows if int(r[0]) in ids}


def _smi_names(ids: list[int]) -> tuple[tuple[str, ...], str | None] | None:
    rows = _smi(["--query-gpu=index,name,driver_version"])
    if rows is None:
        return None
    found = {int(r[0]): (r[1], r[2]) for r in rows}
    return tuple(found[i][0] for i in ids if i in found), next((found[i][1] for i in ids if i in found), None)


def _smi_uuid_of() -> dict[int, str] | None:
    """Every GPU's UUID by its index (nvidia-smi), or None without it."""
    rows = _smi(["--query-gpu=index,uuid"])
    return None if rows is None else {int(i): uuid for i, uuid in rows}


def _smi_uuids(ids: list[int]) -> tuple[str, ...] | None:
    found = _smi_uuid_of()
    return None if found is None else tuple(found[i] for i in ids if i in found)


def _smi_holders(ids: list[int]) -> list[Holder] | None:
    gpus = _smi_uuid_of()
    apps = _smi(["--query-compute-apps=gpu_uuid,pid,used_memory"])
    if gpus is None or apps is None:
        return None
    index = {uuid: i for i, uuid in gpus.items()}
    return [
        Holder(index[uuid], int(pid), float(used) if used.replace(".", "").isdigit() else None)
        for uuid, pid, used in apps
        if uuid in index and index[uuid] in ids
    ]


class GpuHygiene:
    def __init__(
        self,
        devices: list[int],
        *,
        tolerance_mib: float = 1024.0,
        timeout: float = 60.0,
        reader: Callable[[Iterable[int]], dict[int, float] | None] = nvml_used_mib,
        holders: Callable[[Iterable[int]], list[Holder] | None] = nvml_holders,
        hold_grace: float = 10.0,
    ) -> None:
        self.hold_grace = hold_grace
        self.reader = reader
        self.holders = holders
        self.tolerance_mib = tolerance_mib
        self.timeout = timeout
        self.baseline = reader(devices) or {}

    @property
    def available(self) -> bool:
        return bool(self.baseline)

    def held(self, devices: Iterable[int]) -> list[Holder]:
        """Who holds memory on ``devices`` (before a trial there must be nobody), after up to
        ``hold_grace`` seconds for processes that are exiting (a just-stopped server's) to let go."""
        devices = list(devices)
        deadline = time.monotonic() + self.hold_grace
        while True:
            found = list(self.holders(devices) or [])
            if not found or time.monotonic() >= deadline:
                return found
            time.sleep(0.5)

    def settle(self, devices: Iterable[int]) -> dict[int, float]:
        """Wait until every device is within tolerance of its baseline; returns the excess
        (MiB per device) still held when the timeout passed, empty when all recovered."""
        devices = list(devices)
        deadline = time.monotonic() + self.timeout
        while True:
            used = self.reader(devices) or {}
            excess = {d: used[d] - self.baseline.get(d, 0.0) for d in devices if d in used}
            excess = {d: e for d, e in excess.items() if e > self.tolerance_mib}
            if not excess or time.monotonic() >= deadline:
                return excess
            time.sleep(1.0)
