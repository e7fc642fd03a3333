"""SGLang (``python -m sglang.launch_server``). Strings from SGLang 0.5.x's own source:
managers/scheduler.py, mem_cache/memory_pool.py, model_executor/pool_configurator.py."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import httpx

from tuner.base.records import Capacity
from tuner.engines._base import EngineAdapter, FreshSpread, hub_or_local_problem, package_version
from tuner.engines._capacity import last_int, reconcile, to_int
from tuner.engines._signatures import DISTANCE, Category, Signature
from tuner.engines.memory import MemoryModel, kv_bytes, number

__all__ = ["DecodeStep", "SglangAdapter", "decode_steps"]


def _grade_context(line: str) -> dict[str, Any]:
    m = re.search(r"context_length \(([\d,]+)\) is greater than the derived context_length \(([\d,]+)\)", line)
    if not m:
        return {}
    asked, derived = to_int(m[1]), to_int(m[2])
    return {"asked_context_length": asked, "derived_context_length": derived, DISTANCE: asked / derived - 1.0}


SIGNATURES = (
    Signature(
        "not_enough_memory",
        Category.KV_CACHE,
        (r"Not enough memory\. Please try to increase --mem-fraction-static",),
    ),
    Signature(
        "context_above_derived",
        Category.CONTEXT_TOO_LONG,
        # raised (model_config.py) only without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1; with it: a warning
        (r"(Error|error)[:,] Warning: User-specified context_length \(\d+\) is greater than the derived context_length",),
        grade=_grade_context,
    ),
    Signature("cuda_graph_capture_failed", Category.OUT_OF_MEMORY, (r"Capture cuda graph failed",)),
    Signature("cuda_oom", Category.OUT_OF_MEMORY, (r"OutOfMemoryError: CUDA out of memory", r"CUDA out of memory")),
    Signature("port_in_use", Category.PORT_IN_USE, (r"Address already in use",)),
    Signature("bad_flag", Category.BAD_FLAG, (r"error: unrecognized arguments", r"error: argument ")),
    Signature(
        "child_failed",
        Category.CRASH,
        (r"Received sigquit from a child process", r"Scheduler hit an exception"),
    ),
)

_SUMMARY = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+)"
)
_POOL = re.compile(r"KV Cache is allocated\..*?#tokens: ([\d,]+)")


# --cuda-graph-max-bs became a deprecated alias of --cuda-graph-max-bs-decode: 0.5.10.post1 knows
# only the old name, 0.5.17 both (server_args.py of each wheel). The new name is used from 0.5.17.
RENAMED_FROM = (0, 5, 17)
RENAMED = {"cuda-graph-max-bs": "cuda-graph-max-bs-decode"}


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


KV_BYTES = {"auto": 2.0, "bf16": 2.0, "bfloat16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}

MEMORY = MemoryModel(
    # mem-fraction-static holds weights and the KV pool; the rest of the GPU holds activations and graphs
    room=(number("mem-fraction-static"),),
    needs=(
        number("context-length"),
        number("max-running-requests"),
        number("chunked-prefill-size"),
        number("max-prefill-tokens"),
        number("cuda-graph-max-bs"),
        kv_bytes("kv-cache-dtype", KV_BYTES),
    ),
    monotone=frozenset({"not_enough_memory"}),  # a CUDA OOM at graph capture can come from a LARGER fraction
    free=frozenset({"enable-cache-report", "log-level", "enable-metrics", "served-model-name"}),
    length="context-length",
    model_limit=("derived_context_length",),
)


class SglangAdapter(EngineAdapter):
    name = "sglang"
    signatures = SIGNATURES
    memory = MEMORY
    typical_start_s = 100.0  # H200, dummy 8B: 103 s (measured when the GPU bundle was built)
    fresh_server_spread: ClassVar[Mapping[str, FreshSpread]] = {
        "gpu": FreshSpread(0.115, 16, "not measured for SGLang: vLLM 0.26's on the same H200 (docs/noise.md), borrowed")
    }
    listen_flags = ("--host", "--port", "--nccl-port")  # the NCCL port follows the partition's block
    graphs_off_flags = ("disable-cuda-graph",)
    context_slack = 1
    in_flight_source = ("/metrics", ("sglang:num_running_reqs", "sglang:num_queue_reqs"))  # with --enable-metrics
    startup_phases = (
        (r"Load weight begin", "loading weights"),
        (r"Load weight end", "weights loaded"),
        (r"KV Cache is allocated", "KV cache allocated"),
        # 0.5.17: "Capture target prefill CUDA graph begin" / "... decode ..."; older: "Capture cuda graph begin"
        (r"(?i)Capture (?:target \w+ )?cuda graph begin", "capturing graphs"),
        (r"(?i)Capture (?:target \w+ )?cuda graph end", "graphs captured"),
        (r"The server is fired up", "API server up"),
    )

    def executable(self) -> list[str]:
        return [sys.executable, "-m", "sglang.launch_server"]

    def version(self) -> str | None:
        return package_version("sglang", "version.py")

    def render_flags(self, flags: Mapping[str, Any]) -> list[str]:
        version = self.version()
        if version is not None and _version_tuple(version) >= RENAMED_FROM:
            flags = {RENAMED.get(name, name): value for name, value in flags.items()}
        return super().render_flags(flags)

    def api_key_args(self, key: str) -> list[str]:
        return ["--api-key", key]  # SGLang reads no environment variable for it

    def listen_args(self, host: str, port: int) -> list[str]:
        # SGLang opens internal ports (NCCL, ZMQ) from a base: keep them inside the partition's block
        return ["--host", host, "--port", str(port), "--nccl-port", str(port + 50)]

    def model_problem(self, path: str) -> str | None:
        return hub_or_local_problem(path)

    def model_args(self, model_path: str) -> list[str]:
        return ["--model-path", model_path]

    def configured_limits(self, flags: Mapping[str, Any]) -> dict[str, int | None]:
        def get(name: str) -> int | None:
            value = flags.get(name)
            return None if value is None else int(value)

        return {
            "max_running_requests": get("max-running-requests"),
            "context_per_request": get("context-length"),
            "chunked_prefill_size": get("chunked-prefill-size"),
            "max_prefill_tokens": get("max-prefill-tokens"),
            "cuda_graph_max_bs": get("cuda-graph-max-bs") or get("cuda-graph-max-bs-decode"),
            "max_queued_requests": get("max-queued-requests"),
        }

    def ready(self, client: httpx.Client, base_url: str, *, model: str) -> bool:
        try:
            return client.get(f"{base_url}/health_generate").status_code == 200
        except httpx.TransportError:
            return False

    def capacity(self, log_text: str, client: httpx.Client | None, base_url: str | None) -> Capacity:
        sources: dict[str, dict[str, Any]] = {}
        if log := parse_log(log_text):
            sources["log"] = log
        if client is not None and base_url is not None:
            endpoint, info = _server_info(client, base_url)
            if "max_total_num_tokens" in info:
                sources[endpoint] = {
                    "kv_tokens": int(info["max_total_num_tokens"]),
                    "max_running_requests": info.get("max_running_requests"),
                    "context_per_request": info.get("context_length"),
                }
        return reconcile(sources)


_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] ")
_DECODE = re.compile(r"Decode batch, #running-req: (\d+),.*gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)")


@dataclass(frozen=True)
class DecodeStep:
    """One of SGLang's ``Decode batch`` log lines (written every ``decode_log_interval`` = 40
    decode steps): when (the log's local time, to the second), requests running and queued, and
    the mean time of a step since the last line (requests running over the generation throughput,
    prefill batches between them included)."""

    at: datetime
    running: int
    queued: int
    step_ms: float | None


def decode_steps(lines: Iterable[str]) -> list[DecodeStep]:
    """SGLang's ``Decode batch`` lines of a server log, in order (no step time where it logged
    no throughput)."""
    found = []
    for line in lines:
        if (stamp := _STAMP.match(line)) and (m := _DECODE.search(line)):
            running, rate = int(m[1]), float(m[2])
            found.append(
                DecodeStep(
                    datetime.strptime(stamp[1], "%Y-%m-%d %H:%M:%S"),
                    running,
                    int(m[3]),
                    1000 * running / rate if rate > 0 and running else None,
                )
            )
    return found


def parse_log(log_text: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if m := last_int(_SUMMARY, log_text):
        values.update(
            kv_tokens=int(m[1]),
            chunked_prefill_size=int(m[2]),
            max_prefill_tokens=int(m[3]),
            max_running_requests=int(m[4]),
            context_per_request=int(m[5]),
        )
    if m := last_int(_POOL, log_text):
        values["kv_pool_tokens"] = to_int(m[1])
        values.setdefault("kv_tokens", values["kv_pool_tokens"])
    return values


def _server_info(client: httpx.Client, base_url: str) -> tuple[str, dict[str, Any]]:
    """/server_info (0.5.17; /get_server_info is deprecated there), else /get_server_info."""
    for endpoint in ("/server_info", "/get_server_info"):
        try:
            reply = client.get(f"{base_url}{endpoint}")
            if reply.status_code == 200:
                return endpoint, reply.json()
        except (httpx.TransportError, ValueError):
            continue
    return "/server_info", {}
