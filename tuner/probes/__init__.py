"""Probes measure a running server: load (throughput, latency), SLO (the largest load within the
objective set's SLO), recall (effective context), served context, overload (what a burst beyond
capacity meets), confirm (one long run at an SLO answer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.base.metrics import CAPACITY_CONTEXT_PER_REQUEST, CAPACITY_KV_TOKENS, CAPACITY_MAX_RUNNING_REQUESTS
from tuner.probes._base import Probe, ServerHandle
from tuner.probes._drain import in_flight
from tuner.probes._senders import CEILING, Senders, arrival_offsets, client_cores
from tuner.probes._stream import RequestRecord
from tuner.probes.load import LoadProbe
from tuner.probes.long_run import ConfirmProbe
from tuner.probes.overload import OverloadProbe
from tuner.probes.recall import RecallProbe
from tuner.probes.served import ServedContextProbe
from tuner.probes.slo import SloProbe

if TYPE_CHECKING:
    from tuner.space import SearchSpace

__all__ = [
    "CEILING",
    "ConfirmProbe",
    "LoadProbe",
    "OverloadProbe",
    "Probe",
    "RecallProbe",
    "RequestRecord",
    "Senders",
    "ServedContextProbe",
    "ServerHandle",
    "SloProbe",
    "arrival_offsets",
    "client_cores",
    "from_space",
    "in_flight",
    "metric_names",
]

_PROBES: dict[str, type[Probe]] = {
    p.name: p for p in (LoadProbe, SloProbe, RecallProbe, ServedContextProbe, OverloadProbe, ConfirmProbe)
}
CAPACITY_METRICS = {CAPACITY_KV_TOKENS, CAPACITY_MAX_RUNNING_REQUESTS, CAPACITY_CONTEXT_PER_REQUEST}


def from_space(space: SearchSpace) -> list[Probe]:
    """The probes a space asks for, in the order they run (load first: it is the cheapest)."""
    specs = space.probes
    found: list[Probe] = []
    for name, cls in _PROBES.items():
        if (spec := getattr(specs, name)) is None:
            continue
        if cls is ServedContextProbe:  # at the load probe's target concurrency unless the spec says
            found.append(ServedContextProbe(spec, default_concurrency=specs.load.target_concurrency if specs.load else 1))
        elif cls is SloProbe:  # each level is a load-probe level: its workload and windows
            found.append(SloProbe(spec, load=space.load_spec()))
        elif cls is LoadProbe:
            found.append(LoadProbe(space.load_spec() or spec))
        else:
            found.append(cls(spec))
    return found


def metric_names(space: SearchSpace) -> set[str]:
    from tuner.host.telemetry import LEVEL_METRICS
    from tuner.probes.load import PER_GPU

    names = set(CAPACITY_METRICS)
    for probe in from_space(space):
        names |= {f"{probe.name}.{m}" for m in probe.metric_names(probe.spec)}
    if space.hardware.kind == "gpu":  # tuner.probes.load.per_gpu
        for probe in from_space(space):
            names |= {f"{probe.name}.{per}" for _, per in PER_GPU.get(probe.name, ())}
    if space.probes.load is not None:  # sampled during the load levels (tuner.host.telemetry)
        names |= {f"telemetry.{m}" for m in LEVEL_METRICS}
        names |= {f"telemetry.{m}@{c}" for m in LEVEL_METRICS for c in space.probes.load.concurrency}
    return names
