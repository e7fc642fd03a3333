"""What a config holds: configured limits beside runtime-derived ones, and the concurrency each
context length allows. Answers "parallel calls, total context, per-call context"."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.base.metrics import (
    RECALL_EFFECTIVE_CONTEXT,
    SERVED_CONTEXT,
    SLO_CONCURRENCY,
    SLO_CONCURRENCY_VIOLATED,
    SLO_GOODPUT,
    SLO_RATE,
    SLO_RATE_VIOLATED,
)

if TYPE_CHECKING:
    from tuner.trials import TrialRecord

__all__ = ["ContextRow", "Limits", "default_contexts", "for_trial", "from_config"]


@dataclass(frozen=True)
class ContextRow:
    context: int
    by_kv: int | None
    concurrent: int | None
    capped_by: str
    graph_fast_path: int | None
    fits_per_call: bool


@dataclass(frozen=True)
class Limits:
    """Configured limits (flags) and runtime-derived ones (the engine's own capacity lines).

    ``max_queued_requests`` None means the engine queues without bound."""

    kv_tokens: int | None = None
    max_running_requests: int | None = None
    context_per_request: int | None = None
    cuda_graph_max_bs: int | None = None
    chunked_prefill_size: int | None = None
    max_prefill_tokens: int | None = None
    max_queued_requests: int | None = None
    recall_verified_context: int | None = None  # the longest needle rung the config passed (probes.recall)
    served_context: int | None = None  # the context served at the target concurrency (probes.served); 0: failed
    slo_concurrency: int | None = None  # the most concurrent calls that held the objective set's SLO (probes.slo)
    slo_broke_at: int | None = None  # the fewest that broke it
    slo_goodput: float | None = None  # output tok/s at slo_concurrency (or slo_rate)
    slo_rate: float | None = None  # open loop (probes.slo.mode: rate): the largest Poisson request rate that held it
    slo_rate_broke_at: float | None = None  # the smallest rate that broke it
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def queue_unbounded(self) -> bool:
        return self.max_queued_requests is None

    def row(self, context: int) -> ContextRow:
        """Requests of ``context`` tokens that can run at once: KV pool // context, capped by
        the running-request limit. Only up to the graph batch size run on the graph fast path."""
        by_kv = self.kv_tokens // context if self.kv_tokens is not None else None
        candidates = [
            (v, name) for v, name in ((by_kv, "kv pool"), (self.max_running_requests, "max running requests")) if v is not None
        ]
        concurrent, capped_by = min(candidates) if candidates else (None, "unknown")
        fits = self.context_per_request is None or context <= self.context_per_request
        if not fits:
            concurrent, capped_by = 0, "per-call context"
        graph = min(concurrent, self.cuda_graph_max_bs) if concurrent is not None and self.cuda_graph_max_bs else None
        return ContextRow(context, by_kv, concurrent, capped_by, graph, fits)

    def warnings(self) -> list[str]:
        notes = []
        if (
            self.recall_verified_context is not None
            and self.context_per_request
            and self.recall_verified_context < self.context_per_request
        ):
            notes.append(
                f"configured for {self.context_per_request:,} tokens per call, but recall was verified only up to "
                f"{self.recall_verified_context:,}: offer the verified context"
            )
        if self.queue_unbounded:
            notes.append("queue is unbounded: overload waits instead of being rejected (set a max queued requests)")
        if self.cuda_graph_max_bs and self.max_running_requests and self.cuda_graph_max_bs < self.max_running_requests:
            notes.append(
                f"only <= {self.cuda_graph_max_bs} running requests use CUDA graphs (the fast path); "
                f"batches up to {self.max_running_requests} run eagerly"
            )
        return notes

    def _slo_note(self, broke: str | None) -> str:
        """Beside the SLO load: its goodput and the load that broke the SLO, where measured."""
        parts = [f"at {self.slo_goodput:,.1f} output tok/s"] if self.slo_goodput is not None else []
        if broke is not None:
            parts.append(f"{broke} break it")
        return f"   ({'; '.join(parts)})" if parts else ""

    def _slo_line(self, fmt: Any) -> str:
        """The measured SLO load: parallel calls (closed loop), or requests/s where the probe ran open loop."""
        if self.slo_rate is None:
            broke = None if self.slo_broke_at is None else f"{self.slo_broke_at:,}"
            return f"  parallel calls in SLO   {fmt(self.slo_concurrency)}{self._slo_note(broke)}"
        broke = None if self.slo_rate_broke_at is None else f"{self.slo_rate_broke_at:g}/s"
        return f"  requests/s in SLO       {self.slo_rate:g}{self._slo_note(broke)}"

    def to_dict(self, contexts: list[int]) -> dict[str, Any]:
        return {
            **{k: v for k, v in asdict(self).items()},
            "queue_unbounded": self.queue_unbounded,
            "contexts": [asdict(self.row(c)) for c in contexts],
            "warnings": self.warnings(),
        }

    def render(self, contexts: list[int]) -> str:
        def fmt(v: int | None) -> str:
            return "-" if v is None else f"{v:,}"

        lines = [
            "configured",
            f"  per-call context        {fmt(self.context_per_request)}",
            f"  max running requests    {fmt(self.max_running_requests)}",
            f"  chunked prefill size    {fmt(self.chunked_prefill_size)}",
            f"  max prefill tokens      {fmt(self.max_prefill_tokens)}",
            f"  cuda graph max batch    {fmt(self.cuda_graph_max_bs)}",
            f"  max queued requests     {'unbounded' if self.queue_unbounded else fmt(self.max_queued_requests)}",
            "measured",
            f"  recall-verified context {fmt(self.recall_verified_context)}",
            f"  served at concurrency   {fmt(self.served_context)}"
            + ("   (FAILED: long requests side by side did not all complete)" if self.served_context == 0 else ""),
            self._slo_line(fmt),
            "runtime-derived",
            f"  KV pool tokens          {fmt(self.kv_tokens)}"
            + (f"   ({self.sources['kv_tokens']})" if "kv_tokens" in self.sources else ""),
            "",
            f"  {'context':>10}  {'by KV':>8}  {'concurrent':>10}  {'graph path':>10}  capped by",
        ]
        for c in contexts:
            r = self.row(c)
            lines.append(f"  {c:>10,}  {fmt(r.by_kv):>8}  {fmt(r.concurrent):>10}  {fmt(r.graph_fast_path):>10}  {r.capped_by}")
        lines += [f"note: {w}" for w in self.warnings()]
        return "\n".join(lines)


def default_contexts(limits: Limits) -> list[int]:
    """The per-call context and three quarter-steps below it (or common sizes)."""
    top = limits.context_per_request or 131072
    measured = {c for c in (limits.recall_verified_context,) if c}
    return sorted({max(256, top // 4**i) for i in range(4)} | measured, reverse=True)


_MEASURED = (
    ("recall_verified_context", RECALL_EFFECTIVE_CONTEXT),
    ("served_context", SERVED_CONTEXT),
    ("slo_concurrency", SLO_CONCURRENCY),
    ("slo_broke_at", SLO_CONCURRENCY_VIOLATED),
)


def for_trial(configured: dict[str, int | None], trial: TrialRecord) -> Limits:
    """A stored trial's limits: its configured flags, what its engine reported (its capacity)
    and the contexts its probes verified (recall) and served (side by side)."""
    from tuner.base.records import Capacity

    metrics = trial.metrics
    checked: dict[str, Any] = {field_: int(metrics[metric]) for field_, metric in _MEASURED if metric in metrics}
    for field_, metric in (("slo_goodput", SLO_GOODPUT), ("slo_rate", SLO_RATE), ("slo_rate_broke_at", SLO_RATE_VIOLATED)):
        if metric in metrics:
            checked[field_] = float(metrics[metric])
    capacity = Capacity.from_dict(dict(trial.capacity)) if trial.capacity else None
    return from_config({**configured, **checked}, capacity)


def from_config(configured: dict[str, int | None], capacity: Any | None = None, *, source: str = "flags") -> Limits:
    """Configured limits, overridden by what the engine itself reported (``Capacity``)."""
    values = {k: v for k, v in configured.items() if k in Limits.__dataclass_fields__ and k != "sources"}
    sources = {k: source for k, v in values.items() if v is not None}
    if capacity is not None:
        where = ", ".join(capacity.sources) or "engine"
        for name in ("kv_tokens", "max_running_requests", "context_per_request"):
            value = getattr(capacity, name)
            if value is not None:
                values[name] = value
                sources[name] = f"engine ({where})"
        for name in ("chunked_prefill_size", "max_prefill_tokens"):
            for reported in capacity.sources.values():
                if reported.get(name) is not None:
                    values[name] = int(reported[name])
                    sources[name] = f"engine ({where})"
    return Limits(**values, sources=sources)
