"""Workloads: what the probes that load a server send (a space's ``workload:``): length
distributions, multi-turn sessions that resend their history, Mooncake traces; drawn the same in
every process (:mod:`tuner.workload.draw`), read and described (:mod:`tuner.workload.trace`)."""

from tuner.workload.draw import MAX_TURNS, Segment, Session, Turn, Workload, draw, fixed, poisson
from tuner.workload.spec import Dist, LengthsClass, Moments, SessionsClass, TraceClass, WorkloadSpec
from tuner.workload.trace import TraceError, TraceRow, read_trace, reusable, trace_stats

__all__ = [
    "MAX_TURNS",
    "Dist",
    "LengthsClass",
    "Moments",
    "Segment",
    "Session",
    "SessionsClass",
    "TraceClass",
    "TraceError",
    "TraceRow",
    "Turn",
    "Workload",
    "WorkloadSpec",
    "draw",
    "fixed",
    "poisson",
    "read_trace",
    "reusable",
    "trace_stats",
]
