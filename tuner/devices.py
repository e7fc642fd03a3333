"""GPU hygiene: before a partition is reused, its devices' memory must be back near the
baseline seen at start (NVML through nvidia-ml-py where installed). A partition that does not
recover is quarantined: no further trial lands on it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

__all__ = ["GpuHygiene", "nvml_used_mib"]

logger = logging.getLogger(__name__)


def nvml_used_mib(ids: Iterable[int]) -> dict[int, float] | None:
    """Used memory per GPU in MiB, or None where NVML is not available."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return {i: pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used / 2**20 for i in ids}
    finally:
        pynvml.nvmlShutdown()


class GpuHygiene:
    def __init__(
        self,
        devices: list[int],
        *,
        tolerance_mib: float = 1024.0,
        timeout: float = 60.0,
        reader: Callable[[Iterable[int]], dict[int, float] | None] = nvml_used_mib,
    ) -> None:
        self.reader = reader
        self.tolerance_mib = tolerance_mib
        self.timeout = timeout
        self.baseline = reader(devices) or {}

    @property
    def available(self) -> bool:
        return bool(self.baseline)

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
