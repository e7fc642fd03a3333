"""The probe contract and what a probe gets to know about the server it measures."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tuner.base.records import Capacity, ProbeResult

__all__ = ["Probe", "ServerHandle"]


@dataclass(frozen=True)
class ServerHandle:
    """How a probe reaches a running server: its URL, the model name to send, its capacity."""

    url: str
    model: str
    capacity: Capacity
    api_key: str | None = field(default=None, repr=False)
    prefix_cache_metrics: tuple[str, str] | None = None  # the adapter's /metrics counter names
    context_slack: int = 0  # tokens the engine keeps back from the per-request context (SGLang: 1)
    cached_tokens_field: tuple[str, str] | None = None  # the adapter's (event key, field) of cached prompt tokens
    in_flight_source: tuple[str, tuple[str, ...]] | None = None  # where the engine counts requests in flight
    keep: Path | None = None  # the trial's folder: a long probe writes each finished part there, kept if it is cut short
    fast_path: int | None = None  # the most running requests decoded on CUDA graphs, where more may run (EngineAdapter.fast_path)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


class Probe(ABC):
    """Measures one aspect of a running server.

    ``run`` returns a :class:`ProbeResult` whose metric names are exactly those
    ``metric_names`` announces for the same spec (objectives are validated against them),
    or raises :class:`~tuner.base.exceptions.ProbeError` with evidence when it cannot measure.
    """

    name: ClassVar[str]

    def __init__(self, spec: Any) -> None:
        self.spec = spec

    @abstractmethod
    def run(self, server: ServerHandle) -> ProbeResult: ...

    def see(self, earlier: Sequence[ProbeResult]) -> None:
        """What the probes before this one measured on the same server (default: ignored)."""
        return None

    @classmethod
    @abstractmethod
    def metric_names(cls, spec: Any) -> set[str]: ...
