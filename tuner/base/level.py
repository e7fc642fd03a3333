"""One load level's figures, typed: what a probe measured at one concurrency (closed loop) or one
request rate (open loop), how the level was run, and, for the SLO probe, its verdict.

The probes build a :class:`Level` from their window's figures and store it as :meth:`Level.to_dict`
(JSON, in the trial's evidence and the study's attrs). Everything else reads it back with
:meth:`Level.from_dict` (or :func:`levels_in` for a probe's ``levels``) and by attribute. Old
studies read: a key a level no longer stores (``backlog_allowance``) is ignored, one it did not
store yet is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["Level", "levels_in"]


@dataclass(frozen=True)
class Level:
    """A level's figures; None where a level did not measure it (a closed loop has no rate)."""

    # the window: how long it measured, where (perf_counter seconds), its batch-means CI
    window_s: float | None = None
    window_at: tuple[float, float] | None = None
    warmup_s: float | None = None
    batches: int | None = None
    ci_target_met: bool | None = None
    # requests that ended in the window
    requests: int | None = None
    errors: float | None = None
    error_rate: float | None = None
    first_error: str | None = None
    first_error_at_s: float | None = None
    # tokens, by the server's count (``client_output_tokens``: the client's own count of chunks)
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    client_output_tokens: int | None = None
    usage_reported: bool | None = None
    token_mismatch: bool | None = None
    short_outputs: int | None = None
    over_context: int | None = None
    # throughput
    output_tok_s: float | None = None
    output_tok_s_ci: float | None = None
    batch_rates: tuple[float, ...] | None = None
    total_tok_s: float | None = None
    req_s: float | None = None
    # the prompts and outputs as the server counted them, and its prefix cache
    prompt_tokens_min: int | None = None
    prompt_tokens_max: int | None = None
    prompt_tokens_exact: float | None = None
    prompt_tokens_over_asked: float | None = None
    output_tokens_over_asked: float | None = None
    prompt_tokens_p50: float | None = None
    prompt_tokens_p90: float | None = None
    prompt_tokens_p99: float | None = None
    output_tokens_p50: float | None = None
    output_tokens_p90: float | None = None
    output_tokens_p99: float | None = None
    cache_hit_rate: float | None = None
    cache_hit_rate_source: str | None = None
    cache_hit_allowed: float | None = None
    cached_tokens: int | None = None
    cache_hit_by_turn: Mapping[str, float | None] | None = None
    # latencies (seconds) with their sample counts
    ttft_n: int | None = None
    ttft_p50: float | None = None
    ttft_p90: float | None = None
    ttft_p99: float | None = None
    e2e_n: int | None = None
    e2e_p50: float | None = None
    e2e_p90: float | None = None
    e2e_p99: float | None = None
    itl_n: int | None = None
    itl_p50: float | None = None
    itl_p90: float | None = None
    itl_p99: float | None = None
    tpot_n: int | None = None
    tpot_p50: float | None = None
    tpot_p90: float | None = None
    tpot_p99: float | None = None
    waiting: int | None = None  # still waiting for a first token when the window closed
    ttft_p99_censored: float | None = None  # the p99 with their waits so far: a lower bound
    # the open loop: what was asked and what was delivered (tuner.probes.load.open_loop_figures)
    rate: float | None = None
    offered_rate: float | None = None
    achieved_rate: float | None = None
    achieved_over_offered: float | None = None
    client_bound: bool | None = None
    client_late: bool | None = None
    completion_rate: float | None = None
    backlog_growth: float | None = None
    growth: float | None = None
    growth_ci: float | None = None
    growth_batches: int | None = None
    growth_from_s: float | None = None  # where the trend started, seconds into the window
    in_system_mean: float | None = None
    in_system_max: int | None = None  # the most requests sent and not completed at once (the client's count)
    send_lag_p50: float | None = None
    send_lag_p99: float | None = None
    send_lag_max: float | None = None
    in_flight_cap: int | None = None
    senders: int | None = None
    client_cores: int | None = None
    sender_failures: int | None = None
    # how it was judged and started: the horizon an answer must hold for, whether it makes one (a
    # hold), the request timeout, and the drain before it (tuner.probes._drain)
    horizon_s: float | None = None
    decisive: bool | None = None
    request_timeout: float | None = None
    drain_s: float | None = None
    drained: bool | None = None
    drained_by: str | None = None
    # the SLO probe's verdict on it; a long run's slice: its place in the run
    held: bool | None = None
    broke: tuple[str, ...] | None = None
    measured_here: bool | None = None
    utilisation: float | None = None
    index: int | None = None
    from_s: float | None = None
    slices: tuple[Level, ...] | None = None  # a long run's slices (each a level of its own)

    @classmethod
    def of(cls, figures: Mapping[str, Any]) -> Level:
        """A level a probe just measured, from its window's figures: every one of them a field
        (a figure no field holds is an error here, not a figure silently left out of the evidence)."""
        return cls._build(figures, strict=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Level:
        """A stored level (any age): its known keys, each as its field's type."""
        return cls._build(data, strict=False)

    @classmethod
    def _build(cls, data: Mapping[str, Any], *, strict: bool) -> Level:
        if strict and (unknown := sorted(set(data) - set(_NAMES))):
            raise ValueError(f"Level: no field for {', '.join(unknown)}")
        known = {k: v for k, v in data.items() if k in _NAMES}
        for name in ("window_at", "batch_rates", "broke"):
            if known.get(name) is not None:
                known[name] = tuple(known[name])
        if known.get("slices") is not None:
            known["slices"] = tuple(cls._build(s, strict=strict) for s in known["slices"])
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        """As stored: JSON types, the fields it measured (None ones left out)."""
        out: dict[str, Any] = {}
        for name in _NAMES:
            value = getattr(self, name)
            if value is None:
                continue
            if name == "slices":
                value = [s.to_dict() for s in value]
            elif isinstance(value, tuple):
                value = list(value)
            elif name == "cache_hit_by_turn":
                value = dict(value)
            out[name] = value
        return out


_NAMES = tuple(f.name for f in fields(Level))


def levels_in(details: Mapping[str, Any], key: str = "levels") -> dict[str, Level]:
    """A probe's stored levels (``details[key]``: by concurrency or rate, as text) as :class:`Level`."""
    return {name: Level.from_dict(level) for name, level in (details.get(key) or {}).items()}
