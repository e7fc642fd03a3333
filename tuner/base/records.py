"""Frozen, JSON-serialisable records that travel from a trial worker back to the driver."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["Capacity", "ProbeResult", "Timings", "TrialOutcome"]


@dataclass(frozen=True)
class Capacity:
    """What the engine says it can hold, in its own words (log lines, endpoints, metrics).

    ``kv_tokens``: tokens the KV pool holds in total. ``max_running_requests``: requests
    decoded at once (llama.cpp slots). ``context_per_request``: the longest prompt+output one
    request may use. ``sources`` keeps every value with where it came from; where two sources
    disagree, ``disagreements`` says so.
    """

    kv_tokens: int | None = None
    max_running_requests: int | None = None
    context_per_request: int | None = None
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)
    disagreements: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("kv_tokens", "max_running_requests", "context_per_request"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"Capacity.{name} must be >= 0, got {value}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["disagreements"] = list(self.disagreements)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Capacity:
        return cls(**{**data, "disagreements": tuple(data.get("disagreements", ()))})


@dataclass(frozen=True)
class ProbeResult:
    """One probe's measurements. ``metrics`` are flat numbers named without the probe prefix."""

    probe: str
    metrics: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in self.metrics.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError(f"metric {self.probe}.{name} is not a number: {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Timings:
    startup_s: float = 0.0
    probe_s: float = 0.0
    teardown_s: float = 0.0
    started_at: float = 0.0
    ended_at: float = 0.0


@dataclass(frozen=True)
class TrialOutcome:
    """Everything one served trial produced."""

    params: dict[str, Any]
    argv: tuple[str, ...]
    capacity: Capacity
    probes: tuple[ProbeResult, ...]
    timings: Timings
    log_path: str | None = None
    engine_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # what the launch added to the environment (secrets as ***)
    memory_cap: int | None = None  # RLIMIT_AS the server ran under, bytes
    node: str | None = None  # where it ran, on a cluster (host and Ray node)
    host: dict[str, Any] | None = None  # what it ran on (tuner.host.fingerprint.HostFingerprint.to_dict)

    def launch(self) -> dict[str, Any]:
        """What was launched, as `tune export` replays it: argv, env, engine version, memory cap."""
        return {
            "argv": list(self.argv),
            "env": dict(self.env),
            "engine_version": self.engine_version,
            "memory_cap": self.memory_cap,
        }

    def metrics(self) -> dict[str, float]:
        """All probe metrics as ``"<probe>.<metric>"``, plus ``capacity.*``."""
        flat = {f"{r.probe}.{name}": float(v) for r in self.probes for name, v in r.metrics.items()}
        for name in ("kv_tokens", "max_running_requests", "context_per_request"):
            value = getattr(self.capacity, name)
            if value is not None:
                flat[f"capacity.{name}"] = float(value)
        return {k: v for k, v in flat.items() if not math.isnan(v)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "argv": list(self.argv),
            "capacity": self.capacity.to_dict(),
            "probes": [p.to_dict() for p in self.probes],
            "timings": asdict(self.timings),
            "log_path": self.log_path,
            "engine_version": self.engine_version,
            "env": self.env,
            "memory_cap": self.memory_cap,
            "node": self.node,
            "host": self.host,
            "metrics": self.metrics(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialOutcome:
        return cls(
            params=data["params"],
            argv=tuple(data["argv"]),
            capacity=Capacity.from_dict(data["capacity"]),
            probes=tuple(ProbeResult(**p) for p in data["probes"]),
            timings=Timings(**data["timings"]),
            log_path=data.get("log_path"),
            engine_version=data.get("engine_version"),
            env=data.get("env") or {},
            memory_cap=data.get("memory_cap"),
            node=data.get("node"),
            host=data.get("host"),
        )
