"""CPU cores for GPU partitions: each GPU gets its own slice of the cores local to its NUMA node.

Two trials side by side must not slow each other through the host: an engine's API server,
tokenizer and scheduler and the load client all run on CPU cores. Each GPU gets a disjoint slice
of the cores that sysfs names local to it (``/sys/bus/pci/devices/<bus id>/local_cpulist``, bus id
from NVML); GPUs on one NUMA node share that node's cores evenly. Where NVML or sysfs says nothing,
the cores this process may use are split evenly in device order. Within a partition the last
``client_share`` of its cores go to the load client, the rest to the server.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["device_cores", "local_cpulist", "parse_cpulist", "pinned", "split_server_client"]

logger = logging.getLogger(__name__)

SYSFS_PCI = Path("/sys/bus/pci/devices")


def parse_cpulist(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    cores: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cores.extend(range(int(low), int(high or low) + 1))
    return cores


def local_cpulist(device: int) -> list[int] | None:
    """Cores sysfs names local to GPU ``device`` (NVML index), or None where it cannot tell."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML: no locality information
        return None
    try:
        bus = pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(device)).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        domain, rest = bus.lower().split(":", 1)
        path = SYSFS_PCI / f"{domain[-4:]}:{rest}" / "local_cpulist"
        return parse_cpulist(path.read_text())
    except Exception as exc:  # noqa: BLE001
        logger.debug("no local cpulist for GPU %d: %s", device, exc)
        return None
    finally:
        pynvml.nvmlShutdown()


def device_cores(
    devices: Iterable[int],
    *,
    allowed: Iterable[int] | None = None,
    locality: Callable[[int], list[int] | None] = local_cpulist,
) -> dict[int, tuple[int, ...]]:
    """Disjoint cores per GPU: each NUMA group's allowed cores split evenly among its GPUs."""
    devices = list(devices)
    usable = sorted(set(allowed if allowed is not None else os.sched_getaffinity(0)))
    groups: dict[tuple[int, ...], list[int]] = {}
    for device in devices:
        local = [c for c in (locality(device) or usable) if c in usable] or usable
        groups.setdefault(tuple(local), []).append(device)
    result: dict[int, tuple[int, ...]] = {}
    for cores, members in groups.items():
        share = max(1, len(cores) // len(members))
        for i, device in enumerate(members):
            result[device] = cores[i * share : (i + 1) * share] or cores[-1:]
    return result


def split_server_client(cores: tuple[int, ...], client_share: float = 0.25) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(server cores, client cores); the client gets at least one core when there are two or more."""
    if len(cores) < 2:
        return cores, cores
    n_client = max(1, int(len(cores) * client_share))
    return cores[:-n_client], cores[-n_client:]


@contextmanager
def pinned(cores: tuple[int, ...]) -> Iterator[None]:
    """Run this process on ``cores`` (a partition's own: its load client, a calibration), then
    restore its affinity; none given: where it runs."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
