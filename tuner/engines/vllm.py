"""vLLM (OpenAI-compatible API server). Strings from vLLM 0.26's own source:
gpu_worker.py, kv_cache_utils.py, core.py; failures end with "Engine core initialization failed",
whose root cause is logged above it, so that signature has the lowest priority."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from tuner.base.records import Capacity
from tuner.engines._base import EngineAdapter, FreshSpread, hub_or_local_problem, package_version
from tuner.engines._capacity import last_int, reconcile, to_int
from tuner.engines._openai import completion_works, metric_labels
from tuner.engines._signatures import DISTANCE, Category, Signature
from tuner.engines.memory import MemoryModel, kv_bytes, number

__all__ = ["VllmAdapter"]


def _grade_max_len(line: str) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if m := re.search(r"max seq len \(([\d,]+)\)", line):
        details["asked_max_model_len"] = to_int(m[1])
    if m := re.search(r"estimated maximum model length is ([\d,]+)", line):
        details["estimated_max_model_len"] = to_int(m[1])
    if m := re.search(r"\(([\d.]+) GiB KV cache is needed", line):
        details["kv_needed_gib"] = float(m[1])
    if m := re.search(r"available KV cache memory \(([\d.]+) GiB\)", line):
        details["kv_available_gib"] = float(m[1])
    for asked, fits in (("asked_max_model_len", "estimated_max_model_len"), ("kv_needed_gib", "kv_available_gib")):
        if details.get(asked) and details.get(fits):
            details[DISTANCE] = details[asked] / details[fits] - 1.0
            break
    return details


SIGNATURES = (
    Signature(
        "max_model_len_exceeds_kv",
        Category.CONTEXT_TOO_LONG,
        (r"To serve at least one request with the models?'s max seq len", r"estimated maximum model length is"),
        grade=_grade_max_len,
    ),
    Signature("no_kv_cache_memory", Category.KV_CACHE, (r"No available memory for the cache blocks",)),
    Signature(
        "max_model_len_above_derived",
        Category.CONTEXT_TOO_LONG,
        # raised only without VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; with it the same words are a WARNING
        # and vLLM goes on (then may fail with the graded "estimated maximum model length")
        (r"(Error|error)[:,] User-specified max_model_len \(\d+\) is greater than the derived max_model_len",),
    ),
    Signature(
        "free_memory_below_utilization",
        Category.OUT_OF_MEMORY,
        (r"Free memory on device .* on startup is less than desired GPU memory utilization",),
    ),
    Signature("model_load_oom", Category.OUT_OF_MEMORY, (r"Failed to load model - not enough GPU memory",)),
    Signature(
        "cuda_oom",
        Category.OUT_OF_MEMORY,
        (r"CUDA out of memory occurred when warming up sampler", r"OutOfMemoryError: CUDA out of memory"),
    ),
    Signature("port_in_use", Category.PORT_IN_USE, (r"Address already in use",)),
    Signature("bad_flag", Category.BAD_FLAG, (r"error: unrecognized arguments", r"error: argument ")),
    Signature("engine_core_init_failed", Category.CRASH, (r"Engine core initialization failed",)),
)

_KV = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x")


# bytes per cached element by --kv-cache-dtype ("auto": the model's dtype, bf16 for every model this tool serves)
KV_BYTES = {
    "auto": 2.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8_inc": 1.0,
    "fp8_ds_mla": 1.0,
}

MEMORY = MemoryModel(
    # the KV pool is what gpu-memory-utilization leaves after weights, activations (sized by the
    # batched tokens and sequences) and graphs; a longer max-model-len must fit in that pool
    room=(number("gpu-memory-utilization", 0.92),),
    needs=(
        number("max-model-len"),
        number("max-num-seqs"),
        number("max-num-batched-tokens"),
        kv_bytes("kv-cache-dtype", KV_BYTES),
    ),
    # "no memory for the cache blocks" and "max seq len needs more KV than available" only; a raw
    # CUDA OOM (graph capture) can come from MORE utilization, and free memory below the
    # utilization is the GPU's state, not the config's
    monotone=frozenset({"no_kv_cache_memory", "max_model_len_exceeds_kv"}),
    free=frozenset({"enable-prompt-tokens-details", "disable-log-requests", "disable-log-stats", "served-model-name"}),
    length="max-model-len",
    length_limit="estimated_max_model_len",
    length_fits_pool=True,
    length_signature="max_model_len_exceeds_kv",
    # the pool is what profiling with max-num-batched-tokens and max-num-seqs leaves; max-model-len
    # does not enter (measured, docs/data/search-tables/h200-vllm-grid.json: 49,856 tokens at 4,096
    # and at 16,384 for util 0.012, 167,136 at both for 0.03; the 16,384 failure at 0.006 named 8,032,
    # the pool 4,096 got), so the length vLLM names for a failed config holds for shorter ones too
    pool_independent_of_length=True,
    # but not to the token: util 0.03 fp8 got 331,360 tokens at 4,096 and 325,888 at 16,384 (the
    # grid's trials 8 and 11, 1.7 %; the other three pairs were equal), so a length within 5 % of a
    # named or reported pool is launched, not predicted
    pool_margin=0.05,
)


_LOGGED_VERSION = re.compile(r"LLM engine \(v(\d[\w.+-]*)\)|vLLM API server version (\d[\w.+-]*)")


class VllmAdapter(EngineAdapter):
    name = "vllm"
    signatures = SIGNATURES
    memory = MEMORY
    typical_start_s = 75.0  # H200, graphs and compile from cache: 50-115 s (docs/search-efficiency.md)
    fresh_server_spread: ClassVar[Mapping[str, FreshSpread]] = {
        "gpu": FreshSpread(0.115, 16, "H200, vLLM 0.26: 7 configs on 2-5 fresh servers each (docs/noise.md, prior_coverage.py)")
    }
    graphs_off_flags = ("enforce-eager",)
    prefix_cache_metrics = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits")  # usage omits 0 cached tokens
    in_flight_source = ("/metrics", ("vllm:num_requests_running", "vllm:num_requests_waiting"))
    startup_phases = (
        (r"Initializing a V1 LLM engine", "initializing the engine"),
        (r"Starting to load model|Loading model from|Loading weights", "loading weights"),
        (r"Model loading took", "weights loaded, profiling memory"),
        (r"GPU KV cache size", "KV cache allocated"),
        (r"Capturing CUDA graph|Capturing cudagraph", "capturing graphs"),
        (r"Graph capturing finished|init engine .* took", "warming up"),
        (r"Starting vLLM API server|Application startup complete", "API server up"),
    )

    def executable(self) -> list[str]:
        return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"]

    def model_problem(self, path: str) -> str | None:
        return hub_or_local_problem(path)

    def model_args(self, model_path: str) -> list[str]:
        return [model_path]

    def version(self) -> str | None:
        return package_version("vllm", "_version.py", "version.py")

    def logged_version(self, log_text: str) -> str | None:
        """vLLM: "Initializing a V1 LLM engine (v0.26.0)" or "vLLM API server version 0.26.0"."""
        found = _LOGGED_VERSION.search(log_text)
        return (found[1] or found[2]) if found else None

    def config_file(self, flags: Mapping[str, Any]) -> dict[str, Any] | None:
        """What `vllm serve --config FILE` reads: the flags with underscores."""
        return {k.replace("-", "_"): v for k, v in flags.items()}

    def configured_limits(self, flags: Mapping[str, Any]) -> dict[str, int | None]:
        compilation = flags.get("compilation-config") or {}
        if isinstance(compilation, str):
            compilation = json.loads(compilation)
        sizes = compilation.get("cudagraph_capture_sizes") or []
        graph = compilation.get("max_cudagraph_capture_size") or (max(sizes) if sizes else None)
        eager = bool(flags.get("enforce-eager"))
        return {
            "max_running_requests": int(flags.get("max-num-seqs", 256)),
            "context_per_request": None if flags.get("max-model-len") is None else int(flags["max-model-len"]),
            "max_prefill_tokens": None if flags.get("max-num-batched-tokens") is None else int(flags["max-num-batched-tokens"]),
            "cuda_graph_max_bs": None if eager else (int(graph) if graph else None),
            "max_queued_requests": None,  # vLLM's API server queues without bound
        }

    def ready(self, client: httpx.Client, base_url: str, *, model: str) -> bool:
        try:
            if client.get(f"{base_url}/health").status_code != 200:
                return False
        except httpx.TransportError:
            return False
        return completion_works(client, base_url, model, {"ignore_eos": True})

    def api_key_env(self, key: str) -> dict[str, str]:
        return {"VLLM_API_KEY": key}  # vllm serve reads it like --api-key, without putting it in argv

    def capacity(self, log_text: str, client: httpx.Client | None, base_url: str | None) -> Capacity:
        sources: dict[str, dict[str, Any]] = {}
        if log := parse_log(log_text):
            sources["log"] = log
        if client is not None and base_url is not None:
            try:
                labels = metric_labels(client.get(f"{base_url}/metrics").text, "vllm:cache_config_info")
            except httpx.TransportError:
                labels = {}
            if "kv_cache_size_tokens" in labels:
                sources["/metrics"] = {"kv_tokens": to_int(labels["kv_cache_size_tokens"]), **labels}
        return reconcile(sources)


def parse_log(log_text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if m := last_int(_KV, log_text):
        values["kv_tokens"] = to_int(m[1])
    if m := last_int(_CONCURRENCY, log_text):
        values["context_per_request"] = to_int(m[1])
        values["max_concurrency_at_context"] = float(m[2].replace(",", ""))
    return values
