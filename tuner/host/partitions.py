"""Partitions: disjoint sets of devices (CPU cores or GPU ids), each with its own port block."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from tuner.base.exceptions import InfrastructureError
from tuner.host.cores import device_cores, split_server_client

__all__ = ["Partition", "PartitionPool", "free_port", "make_partitions", "trial_size"]

PORT_BASE = 31000
PORT_SPAN = 100


@dataclass(frozen=True)
class Partition:
    """A set of devices one trial owns while it runs, and the ports its server may use."""

    index: int
    kind: Literal["cpu", "gpu"]
    devices: tuple[int, ...]
    port_base: int
    cpus: tuple[int, ...] = ()
    client_cpus: tuple[int, ...] = ()

    @property
    def server_cpus(self) -> tuple[int, ...]:
        """The server's cores: a CPU partition's devices, a GPU partition's own cores (none: unpinned)."""
        return self.devices if self.kind == "cpu" else self.cpus

    def wrap(self, argv: list[str]) -> list[str]:
        """Pin the server to its cores (:attr:`server_cpus`)."""
        cores = self.server_cpus
        if cores:
            return ["taskset", "--cpu-list", ",".join(map(str, cores)), *argv]
        return argv

    def env(self) -> dict[str, str]:
        if self.kind == "gpu":
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.devices))}
        return {}

    def port(self, host: str = "127.0.0.1", *, after: int | None = None) -> int:
        """A free port of this partition's block (above ``after``: one another program took)."""
        start = after + 1 if after is not None and self.port_base <= after < self.port_base + PORT_SPAN - 1 else self.port_base
        return free_port(host, start, self.port_base + PORT_SPAN - start)

    def describe(self) -> str:
        cores = f", server cores {_ranges(self.cpus)}, client cores {_ranges(self.client_cpus)}" if self.cpus else ""
        return f"partition {self.index}: {self.kind} {','.join(map(str, self.devices))}, ports {self.port_base}+{cores}"


def _ranges(cores: tuple[int, ...]) -> str:
    return f"{cores[0]}-{cores[-1]}" if len(cores) > 1 and cores[-1] - cores[0] == len(cores) - 1 else ",".join(map(str, cores))


def _with_cores(partition: Partition, cores: dict[int, tuple[int, ...]] | None) -> Partition:
    """A GPU partition gets the cores of its GPUs, split between its server and its load client."""
    if partition.kind != "gpu" or not cores:
        return partition
    # GPUs can share cores (fewer cores than GPUs, or one NUMA node's list for several): each once
    own = tuple(dict.fromkeys(c for d in partition.devices for c in cores.get(d, ())))
    server, client = split_server_client(own)
    return replace(partition, cpus=server, client_cpus=client)


def trial_size(per_trial: int | str, params: Mapping[str, Any]) -> int:
    """Devices one trial needs: a fixed count, or the value of a parameter (e.g. ``tp``)."""
    return int(params[per_trial]) if isinstance(per_trial, str) else per_trial


def make_partitions(kind: Literal["cpu", "gpu"], devices: list[int], size: int) -> list[Partition]:
    """Split ``devices`` into ``len(devices) // size`` partitions of ``size`` devices."""
    if size < 1 or size > len(devices):
        raise ValueError(f"a trial of {size} devices does not fit in {len(devices)}")
    count = len(devices) // size
    cores = _gpu_cores(kind, devices)
    return [
        _with_cores(Partition(i, kind, tuple(devices[i * size : (i + 1) * size]), PORT_BASE + i * PORT_SPAN), cores)
        for i in range(count)
    ]


def _gpu_cores(kind: str, devices: list[int]) -> dict[int, tuple[int, ...]] | None:
    return device_cores(devices) if kind == "gpu" else None


def free_port(host: str, base: int, span: int) -> int:
    """The first port in ``[base, base+span)`` that can be bound on ``host`` right now."""
    for port in range(base, base + span):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise InfrastructureError(f"no free port in {host}:{base}-{base + span - 1}")


class PartitionPool:
    """Hands out disjoint partitions of ``devices``: first fit, contiguous in the listed order,
    so trials of different sizes (e.g. tp 4 and 8) pack. Each slot has its own port block."""

    def __init__(self, kind: Literal["cpu", "gpu"], devices: list[int]) -> None:
        self.kind = kind
        self.devices = list(devices)
        self._busy: set[int] = set()  # indices into self.devices
        self.quarantined: set[int] = set()
        self._cores = _gpu_cores(kind, self.devices)

    def acquire(self, size: int) -> Partition | None:
        if size < 1 or size > len(self.devices):
            raise ValueError(f"a trial of {size} devices does not fit in {len(self.devices)}")
        taken = self._busy | self.quarantined
        for start in range(0, len(self.devices) - size + 1, size):
            span = range(start, start + size)
            if not taken & set(span):
                self._busy |= set(span)
                devices = tuple(self.devices[i] for i in span)
                return _with_cores(Partition(start // size, self.kind, devices, PORT_BASE + start * PORT_SPAN), self._cores)
        return None

    def release(self, partition: Partition) -> None:
        self._busy -= {self.devices.index(d) for d in partition.devices}

    def quarantine(self, partition: Partition) -> None:
        self.quarantined |= {self.devices.index(d) for d in partition.devices}
