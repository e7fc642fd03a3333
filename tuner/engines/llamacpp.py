"""llama.cpp ``llama-server``: the CPU engine and the embedded default.

Strings below come from the llama.cpp sources vendored in llama-cpp-python 0.3.36:
tools/server/server.cpp, tools/server/server-http.cpp, tools/server/server-context.cpp,
common/arg.cpp, src/llama-kv-cache.cpp, src/llama-context.cpp, ggml/src/ggml.c.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from tuner.base.exceptions import ProvisionError
from tuner.base.records import Capacity
from tuner.engines import llamacpp_provision as provision
from tuner.engines._base import EngineAdapter, FreshSpread
from tuner.engines._capacity import last_int, reconcile
from tuner.engines._signatures import Category, Signature
from tuner.engines.memory import Axis, MemoryModel, number

if TYPE_CHECKING:
    pass

__all__ = ["LlamaCppAdapter"]

logger = logging.getLogger(__name__)

BUILTIN_MODEL = "builtin:smollm2-135m-instruct"

SIGNATURES = (
    Signature(
        "kv_cache_oom",
        Category.KV_CACHE,
        (
            r"failed to allocate buffer for kv cache",
            r"ggml_aligned_malloc: insufficient memory",
            r"failed to initialize memory (module|context)",
        ),
    ),
    Signature(
        "out_of_memory",
        Category.OUT_OF_MEMORY,
        (r"std::bad_alloc", r"failed to allocate .*buffer", r"Cannot allocate memory"),
    ),
    Signature(
        "quantized_v_needs_flash_attn",
        Category.BAD_FLAG,
        (r"quantized V cache (requires flash_attn|was requested, but this requires Flash Attention)",),
    ),
    Signature(
        "bad_flag",
        Category.BAD_FLAG,
        (r"error: invalid argument: ", r"error while handling argument", r"error: unknown value for "),
    ),
    Signature("port_in_use", Category.PORT_IN_USE, (r"couldn't bind HTTP server socket",)),
    # std::thread's EAGAIN: the HTTP pool's threads (n_parallel + 4 at start, one more per connection
    # past them) could not be made. Under a space's memory cap that is the cap: the model and KV
    # cache fitted, 8 MiB more per thread's stack did not (a process or cgroup pid limit says the same).
    Signature("threads_over_memory_cap", Category.OUT_OF_MEMORY, (r"what\(\):\s+Resource temporarily unavailable",)),
    Signature(
        "crash",
        Category.CRASH,
        (
            r"GGML_ASSERT",
            r"Segmentation fault",
            r"terminate called after throwing",
            r"^\s*what\(\):",  # the C++ exception's message, the line after
            r"exiting due to model loading error",
            r"failed to load model",
            r"exiting due to HTTP server error",
        ),
    ),
)

_SLOTS = re.compile(r"n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'")


# bits per cached element of llama.cpp's KV types (ggml block sizes): only their order and ratios matter
KV_BITS = {"f32": 32.0, "f16": 16.0, "bf16": 16.0, "q8_0": 8.5, "q5_1": 6.0, "q5_0": 5.5, "q4_1": 5.0, "q4_0": 4.5, "iq4_nl": 4.5}


def _kv_size(values: Mapping[str, Any]) -> float | None:
    """KV bits per layer-element: ctx-size x (K + V bits); None where a part is unknown."""
    k, v = KV_BITS.get(str(values.get("cache-type-k", "f16"))), KV_BITS.get(str(values.get("cache-type-v", "f16")))
    try:
        ctx = float(values["ctx-size"])
    except (KeyError, TypeError, ValueError):
        return None
    return None if k is None or v is None else ctx * (k + v)


MEMORY = MemoryModel(
    # under the space's memory cap (fixed for a study): the KV cache, slots and compute buffers
    room=(),
    needs=(
        Axis("kv", ("ctx-size", "cache-type-k", "cache-type-v"), _kv_size),
        number("parallel", 4),
        number("batch-size", 2048),
        number("ubatch-size", 512),
    ),
    monotone=frozenset({"kv_cache_oom", "out_of_memory", "threads_over_memory_cap"}),
    free=frozenset({"threads", "threads-batch", "metrics", "no-warmup", "temp"}),
    length="ctx-size",
)


class LlamaCppAdapter(EngineAdapter):
    name = "llamacpp"
    cached_tokens_field = ("timings", "cache_n")  # prompt tokens reused from the slot's cache
    in_flight_source = ("/slots", ("is_processing",))  # /slots is on by default (--no-slots turns it off)
    signatures = SIGNATURES
    memory = MEMORY
    typical_start_s = 1.0  # SmolLM2 on 2 cores: 0.3-1 s
    typical_install_s = 300.0  # llama-server's build on 2 cores: 4-6 min (README, 2026-12-03)
    fresh_server_spread: ClassVar[Mapping[str, FreshSpread]] = {
        "cpu": FreshSpread(0.064, 9, "2 cores, the embedded default's baseline on 10 fresh servers (docs/noise.md)")
    }
    startup_phases = (
        (r"llama_model_loader|load_model: loading model", "loading weights"),
        (r"load_model: initializing|llama_kv_cache", "allocating the KV cache"),
        (r"model loaded|listening on", "API server up"),
    )

    def executable(self) -> list[str]:
        return [str(provision.server_binary())]

    def model_args(self, model_path: str) -> list[str]:
        return ["--model", model_path]

    def version(self) -> str | None:
        return f"llama-cpp-python=={provision.LLAMA_CPP_PYTHON_VERSION} (vendored llama.cpp)"

    def provision(self, progress: provision.Progress | None = None) -> None:
        provision.server_binary(progress=progress)
        provision.model_file()

    def installed(self) -> tuple[list[str] | None, str]:
        try:
            binary = provision.server_binary(install=False)
        except ProvisionError:
            return (
                None,
                f"llamacpp {self.version()}: llama-server not built yet (the first run builds it, about 6 minutes on 2 cores)",
            )
        return [str(binary)], f"llamacpp {self.version()}: {binary}"

    def shown_model(self, path: str) -> str:
        if path != BUILTIN_MODEL:
            return path
        try:
            return str(provision.model_file(install=False))
        except ProvisionError:
            return f"{path} (unpacked on first use)"

    def resolve_model(self, path: str) -> str:
        return str(provision.model_file()) if path == BUILTIN_MODEL else path

    def model_problem(self, path: str) -> str | None:
        if path.startswith("builtin:"):
            return None if path == BUILTIN_MODEL else f"unknown builtin model {path!r} (known: {BUILTIN_MODEL})"
        if not os.path.isfile(path):
            return f"model file {path!r} does not exist"
        return None

    def api_key_env(self, key: str) -> dict[str, str]:
        return {"LLAMA_API_KEY": key}

    def configured_limits(self, flags: Mapping[str, Any]) -> dict[str, int | None]:
        slots = int(flags.get("parallel", 4))
        ctx = flags.get("ctx-size")
        unified = bool(flags.get("kv-unified", "parallel" not in flags))
        per_call = None if ctx is None else int(ctx) if unified else int(ctx) // slots
        return {
            "max_running_requests": slots,
            "context_per_request": per_call,
            "max_prefill_tokens": int(flags.get("batch-size", 2048)),
            "chunked_prefill_size": int(flags.get("ubatch-size", 512)),
            "max_queued_requests": None,  # llama-server queues without bound
        }

    def ready(self, client: httpx.Client, base_url: str, *, model: str) -> bool:
        try:
            if client.get(f"{base_url}/health").status_code != 200:
                return False
            props = client.get(f"{base_url}/props").json()
            if os.path.realpath(props.get("model_path", "")) != os.path.realpath(model):
                # Another server answers on this port: never mistake it for ours.
                logger.warning("server on %s serves %s, not %s", base_url, props.get("model_path"), model)
                return False
            reply = client.post(f"{base_url}/v1/completions", json={"prompt": "Hello", "max_tokens": 1})
            return reply.status_code == 200 and bool(reply.json().get("choices"))
        except (httpx.TransportError, ValueError):
            return False

    def capacity(self, log_text: str, client: httpx.Client | None, base_url: str | None) -> Capacity:
        sources: dict[str, dict[str, Any]] = {}
        log = _from_log(log_text)
        if log:
            sources["log"] = log
        if client is not None and base_url is not None:
            for name, read in (("/props", _from_props), ("/slots", _from_slots)):
                if values := read(client, base_url):
                    sources[name] = values
        return reconcile(sources)


def _from_log(log_text: str) -> dict[str, Any]:
    match = last_int(_SLOTS, log_text)
    if match is None:
        return {}
    slots, per_slot, unified = int(match[1]), int(match[2]), match[3] == "true"
    return {
        "max_running_requests": slots,
        "context_per_request": per_slot,
        "kv_tokens": per_slot if unified else slots * per_slot,
        "kv_unified": unified,
    }


def _from_props(client: httpx.Client, base_url: str) -> dict[str, Any]:
    try:
        props = client.get(f"{base_url}/props").json()
    except (httpx.TransportError, ValueError):
        return {}
    values: dict[str, Any] = {}
    if "total_slots" in props:
        values["max_running_requests"] = int(props["total_slots"])
    n_ctx = props.get("default_generation_settings", {}).get("n_ctx")
    if n_ctx is not None:
        values["context_per_request"] = int(n_ctx)
    return values


def _from_slots(client: httpx.Client, base_url: str) -> dict[str, Any]:
    try:
        slots = client.get(f"{base_url}/slots").json()
    except (httpx.TransportError, ValueError):
        return {}
    if not isinstance(slots, list) or not slots:
        return {}
    return {"max_running_requests": len(slots), "context_per_request": int(slots[0].get("n_ctx", 0)) or None}
