"""The names of the metrics tuner stores and reads, each written once: a probe's figures are
``<probe>.<figure>`` (``slo.goodput``), and per load level ``<name>@<level>``. Code that reads
or compares a stored metric names it through a constant here (a test finds any other literal)."""

from __future__ import annotations

CAPACITY_CONTEXT_PER_REQUEST = "capacity.context_per_request"
CAPACITY_KV_TOKENS = "capacity.kv_tokens"
CAPACITY_MAX_RUNNING_REQUESTS = "capacity.max_running_requests"

LOAD_ERROR_RATE = "load.error_rate"
LOAD_OUTPUT_TOK_S = "load.output_tok_s"
LOAD_OUTPUT_TOK_S_CI = "load.output_tok_s_ci"
LOAD_TTFT_P99 = "load.ttft_p99"

RECALL_EFFECTIVE_CONTEXT = "recall.effective_context"

SERVED_CONTEXT = "served.context"

SLO_ACHIEVED_OVER_OFFERED = "slo.achieved_over_offered"
SLO_COMPLETION_RATE = "slo.completion_rate"
SLO_CONCURRENCY = "slo.concurrency"
SLO_CONCURRENCY_VIOLATED = "slo.concurrency_violated"
SLO_GOODPUT = "slo.goodput"
SLO_GOODPUT_CI = "slo.goodput_ci"
SLO_GOODPUT_PER_GPU = "slo.goodput_per_gpu"
SLO_GOODPUT_PER_GPU_CI = "slo.goodput_per_gpu_ci"
SLO_HELD_S = "slo.held_s"
SLO_LEVELS = "slo.levels"
SLO_RATE = "slo.rate"
SLO_RATE_CLIENT_BOUND = "slo.rate_client_bound"
SLO_RATE_VIOLATED = "slo.rate_violated"
# the figures the SLO probe stores of the level at its answer, each as ``slo.<figure>``: every
# loop's, and the open loop's (what was asked and what was delivered)
SLO_AT_LEVEL = ("ttft_p99", "itl_p99", "tpot_p99", "error_rate", "req_s")
SLO_AT_RATE = (
    "offered_rate",
    "achieved_rate",
    "achieved_over_offered",
    "completion_rate",
    "send_lag_p99",
    "backlog_growth",
    "growth",
)

TELEMETRY_POWER_W = "telemetry.power_w"
TELEMETRY_TOKENS_PER_JOULE = "telemetry.tokens_per_joule"

__all__ = [
    "CAPACITY_CONTEXT_PER_REQUEST",
    "CAPACITY_KV_TOKENS",
    "CAPACITY_MAX_RUNNING_REQUESTS",
    "LOAD_ERROR_RATE",
    "LOAD_OUTPUT_TOK_S",
    "LOAD_OUTPUT_TOK_S_CI",
    "LOAD_TTFT_P99",
    "RECALL_EFFECTIVE_CONTEXT",
    "SERVED_CONTEXT",
    "SLO_ACHIEVED_OVER_OFFERED",
    "SLO_AT_LEVEL",
    "SLO_AT_RATE",
    "SLO_COMPLETION_RATE",
    "SLO_CONCURRENCY",
    "SLO_CONCURRENCY_VIOLATED",
    "SLO_GOODPUT",
    "SLO_GOODPUT_CI",
    "SLO_GOODPUT_PER_GPU",
    "SLO_GOODPUT_PER_GPU_CI",
    "SLO_HELD_S",
    "SLO_LEVELS",
    "SLO_RATE",
    "SLO_RATE_CLIENT_BOUND",
    "SLO_RATE_VIOLATED",
    "TELEMETRY_POWER_W",
    "TELEMETRY_TOKENS_PER_JOULE",
]
