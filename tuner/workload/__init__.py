"""Workloads: what the probes that load a server send (a space's ``workload:``): length
distributions, multi-turn sessions that resend their history, Mooncake traces, SGLang's agentic
traces read as sessions; drawn the same in
every process (:mod:`tuner.workload.draw`), read and described (:mod:`tuner.workload.trace`)."""

from tuner.workload.agentic import agentic_stats, read_agentic
from tuner.workload.draw import MAX_TURNS, Segment, Session, Turn, Workload, draw, fixed, poisson
from tuner.workload.spec import AgenticClass, Dist, LengthsClass, Moments, SessionsClass, TraceClass, WorkloadSpec
from tuner.workload.trace import TraceError, TraceRow, read_trace, reusable, trace_stats

__all__ = [
    "MAX_TURNS",
    "AgenticClass",
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
    "agentic_stats",
    "draw",
    "fixed",
    "poisson",
    "read_agentic",
    "read_trace",
    "reusable",
    "trace_stats",
]
