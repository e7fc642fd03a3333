"""Partitions: disjoint sets of devices (CPU cores or GPU ids), each with its own port block."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tuner.exceptions import InfrastructureError

__all__ = ["Partition", "free_port", "make_partitions", "trial_size"]

PORT_BASE = 31000
PORT_SPAN = 100


@dataclass(frozen=True)
class Partition:
    """A set of devices one trial owns while it runs, and the ports its server may use."""

    index: int
    kind: Literal["cpu", "gpu"]
    devices: tuple[int, ...]
    port_base: int

    def wrap(self, argv: list[str]) -> list[str]:
        """Pin a CPU partition's server to its cores; GPU partitions use the environment."""
        if self.kind == "cpu":
            return ["taskset", "--cpu-list", ",".join(map(str, self.devices)), *argv]
        return argv

    def env(self) -> dict[str, str]:
        if self.kind == "gpu":
            return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.devices))}
        return {}

    def port(self, host: str = "127.0.0.1") -> int:
        return free_port(host, self.port_base, PORT_SPAN)

    def describe(self) -> str:
        return f"partition {self.index}: {self.kind} {','.join(map(str, self.devices))}, ports {self.port_base}+"


def trial_size(per_trial: int | str, params: Mapping[str, Any]) -> int:
    """Devices one trial needs: a fixed count, or the value of a parameter (e.g. ``tp``)."""
    return int(params[per_trial]) if isinstance(per_trial, str) else per_trial


def make_partitions(kind: Literal["cpu", "gpu"], devices: list[int], size: int) -> list[Partition]:
    """Split ``devices`` into ``len(devices) // size`` partitions of ``size`` devices."""
    if size < 1 or size > len(devices):
        raise ValueError(f"a trial of {size} devices does not fit in {len(devices)}")
    count = len(devices) // size
    return [
        Partition(i, kind, tuple(devices[i * size : (i + 1) * size]), PORT_BASE + i * PORT_SPAN)
        for i in range(count)
    ]


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
