"""vLLM and SGLang signatures and capacity, on the lines quoted in shared/engines.md and
shared/gpu/README.md (seen on a real H200 with vLLM 0.26 and SGLang 0.5.17)."""

from __future__ import annotations

import pytest

from tuner import engines
from tuner.engines import Category

VLLM_MAX_LEN = (
    "ValueError: To serve at least one request with the model's max seq len (2000000), (244.14 GiB KV cache "
    "is needed, which is larger than the available KV cache memory (27.07 GiB). Based on the available "
    "memory, the estimated maximum model length is 221776. Try increasing `gpu_memory_utilization` or "
    "decreasing `max_model_len` when initializing the engine."
)
ENGINE_CORE = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


@pytest.mark.parametrize(
    ("engine", "text", "signature", "category"),
    [
        (
            "vllm",
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
            "the engine.\n" + ENGINE_CORE,
            "no_kv_cache_memory",
            Category.KV_CACHE,
        ),
        ("vllm", VLLM_MAX_LEN + "\n" + ENGINE_CORE, "max_model_len_exceeds_kv", Category.CONTEXT_TOO_LONG),
        ("vllm", VLLM_MAX_LEN.replace("model's", "models's"), "max_model_len_exceeds_kv", Category.CONTEXT_TOO_LONG),
        (
            "vllm",
            "ValueError: Free memory on device cuda:0 (10.5/139.8 GiB) on startup is less than desired GPU memory utilization "
            "(0.9, 125.8 GiB).",
            "free_memory_below_utilization",
            Category.OUT_OF_MEMORY,
        ),
        (
            "vllm",
            "pydantic_core._pydantic_core.ValidationError: Value error, User-specified max_model_len (2000000) is greater than "
            "the derived max_model_len (max_position_embeddings=8192 in model's config.json).",
            "max_model_len_above_derived",
            Category.CONTEXT_TOO_LONG,
        ),
        ("vllm", "ValueError: Failed to load model - not enough GPU memory", "model_load_oom", Category.OUT_OF_MEMORY),
        (
            "vllm",
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests.",
            "cuda_oom",
            Category.OUT_OF_MEMORY,
        ),
        (
            "vllm",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n" + ENGINE_CORE,
            "cuda_oom",
            Category.OUT_OF_MEMORY,
        ),
        ("vllm", ENGINE_CORE, "engine_core_init_failed", Category.CRASH),
        (
            "sglang",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "not_enough_memory",
            Category.KV_CACHE,
        ),
        (
            "sglang",
            "ValueError: Warning: User-specified context_length (2000000) is greater than the derived context_length (8192). "
            "This may lead to incorrect model outputs or CUDA errors.",
            "context_above_derived",
            Category.CONTEXT_TOO_LONG,
        ),
        (
            "sglang",
            "Exception: Capture cuda graph failed: CUDA out of memory.\nPossible solutions:\n1. set --mem-fraction-static to a "
            "smaller value",
            "cuda_graph_capture_failed",
            Category.OUT_OF_MEMORY,
        ),
        ("sglang", "Received sigquit from a child process. It usually means the child failed.", "child_failed", Category.CRASH),
        ("sglang", "Scheduler hit an exception: Traceback (most recent call last):", "child_failed", Category.CRASH),
    ],
)
def test_gpu_failure_lines(engine: str, text: str, signature: str, category: str) -> None:
    match = engines.get(engine).classify("INFO starting\n" + text + "\n")
    assert match is not None and match.signature.name == signature
    assert match.signature.category == category
    assert match.lines[0].number == 2


def test_vllm_grade_of_max_len_failure() -> None:
    match = engines.get("vllm").classify(VLLM_MAX_LEN)
    assert match.details == {
        "asked_max_model_len": 2000000,
        "estimated_max_model_len": 221776,
        "kv_needed_gib": 244.14,
        "kv_available_gib": 27.07,
        engines.DISTANCE: pytest.approx(2000000 / 221776 - 1),  # the length's ratio first: what the user changes
    }


def test_sglang_grade_of_context_failure() -> None:
    line = "ValueError: Warning: User-specified context_length (2000000) is greater than the derived context_length (8192)."
    assert engines.get("sglang").classify(line).details == {
        "asked_context_length": 2000000,
        "derived_context_length": 8192,
        engines.DISTANCE: pytest.approx(2000000 / 8192 - 1),
    }


def test_vllm_capacity_last_line_wins_with_separators() -> None:
    log = (
        "INFO [kv_cache_utils.py] GPU KV cache size: 1,000 tokens\n"
        "INFO [kv_cache_utils.py] GPU KV cache size: 908,560 tokens\n"
        "INFO [kv_cache_utils.py] Maximum concurrency for 8,192 tokens per request: 110.91x\n"
    )
    cap = engines.get("vllm").capacity(log, None, None)
    assert cap.kv_tokens == 908560
    assert cap.context_per_request == 8192
    assert cap.sources["log"]["max_concurrency_at_context"] == 110.91


def test_sglang_capacity_from_both_lines() -> None:
    log = (
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 855873, K size: 52.24 GB, V size: 52.24 GB\n"
        "max_total_num_tokens=855873, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4096, context_len=8192, available_gpu_mem=19.03 GB\n"
    )
    cap = engines.get("sglang").capacity(log, None, None)
    assert (cap.kv_tokens, cap.max_running_requests, cap.context_per_request) == (855873, 4096, 8192)
    assert cap.sources["log"]["kv_pool_tokens"] == 855873


def test_reconcile_flags_disagreement() -> None:
    from tuner.engines._capacity import reconcile

    cap = reconcile({"log": {"kv_tokens": 908560}, "/metrics": {"kv_tokens": 900000}})
    assert cap.kv_tokens == 908560
    assert cap.disagreements == ("kv_tokens: log says 908560, /metrics says 900000",)


def test_unknown_engine_lists_known() -> None:
    from tuner.base.exceptions import ConfigError

    with pytest.raises(ConfigError, match=r"'tgi' is not registered; available: \['llamacpp', 'sglang', 'vllm'\]"):
        engines.get("tgi")


# seen on the H200 (vLLM 0.26, VLLM_ALLOW_LONG_MAX_MODEL_LEN=1): a warning, after which vLLM goes on
VLLM_LONG_LEN_WARNING = (
    "(APIServer pid=2004) WARNING 11-29 09:42:13 [model.py:2283] User-specified max_model_len (2000000) is "
    "greater than the derived max_model_len (max_position_embeddings=8192.0 or model_max_length=None in "
    "model's config.json). VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution."
)


def test_allowed_long_max_model_len_is_a_warning_not_a_failure() -> None:
    from tuner.engines import first_fatal

    adapter = engines.get("vllm")
    assert adapter.classify(VLLM_LONG_LEN_WARNING) is None
    assert first_fatal(adapter.signatures, VLLM_LONG_LEN_WARNING) is None
    assert adapter.classify(VLLM_LONG_LEN_WARNING + "\n" + VLLM_MAX_LEN).signature.name == "max_model_len_exceeds_kv"


def test_allowed_long_sglang_context_is_a_warning_not_a_failure() -> None:
    line = (
        "[2026-11-29 09:42:13] Warning: User-specified context_length (2000000) is greater than the derived context_length "
        "(8192)."
    )
    assert engines.get("sglang").classify(line) is None


# SGLang 0.5.17 (mem_cache/kv_cache_configurator.py) raises this when the weights leave no room for
# the KV cache; no signature knows its words, and the scheduler's crash line comes first.
SGLANG_MEM_FRACTION = "\n".join(
    (
        "[2026-11-29 10:00:00] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/tmp/site/sglang/srt/managers/scheduler.py", line 3000, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)",
        '  File "/tmp/site/sglang/srt/mem_cache/kv_cache_configurator.py", line 1647, in _profile_available_bytes',
        "    raise ValueError(",
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.1. "
        "Raise --mem-fraction-static above 0.170 (minimum viable = 1 - available/pre = 0.1693). If using "
        "speculative decoding, draft weights are now counted.",
        "",
        "[2026-11-29 10:00:01] Received sigquit from a child process. It usually means the child failed.",
        "",
    )
)


def test_unknown_wording_is_headed_by_the_raised_exception_and_graded_by_its_numbers() -> None:
    from tuner.trials import grade

    match = engines.get("sglang").classify(SGLANG_MEM_FRACTION)
    assert match.signature.name == "raised_kv_cache_does_not_fit"
    assert match.signature.category == Category.KV_CACHE
    assert match.lines[0].text.startswith("ValueError: Loaded weights leave no GPU memory")
    assert match.details["asked_flag"] == "--mem-fraction-static"
    assert (match.details["asked"], match.details["viable"]) == (0.1, 0.17)
    assert grade(match.details) == pytest.approx(0.7)


def test_vllm_root_cause_beats_the_api_servers_reraise() -> None:
    drifted = (
        "(EngineCore pid=7) Traceback (most recent call last):\n"
        '(EngineCore pid=7)   File "core.py", line 9, in run\n'
        "(EngineCore pid=7) ValueError: Insufficient device memory left for KV cache blocks.\n"
        "Traceback (most recent call last):\n"
        '  File "api_server.py", line 3, in main\n' + ENGINE_CORE + "\n"
    )
    match = engines.get("vllm").classify(drifted)
    assert match.signature.name == "raised_kv_cache_does_not_fit"
    assert "Insufficient device memory" in match.lines[0].text


@pytest.mark.parametrize(
    ("words", "category"),
    [
        ("RuntimeError: CUDA error: out of memory", Category.OUT_OF_MEMORY),
        ("ValueError: requested context length 999999 is too long for this model", Category.CONTEXT_TOO_LONG),
        ("OSError: [Errno 98] Address already in use", Category.PORT_IN_USE),
        ("AssertionError: something else entirely", Category.CRASH),
    ],
)
def test_a_raised_exception_is_classified_by_its_words(words: str, category: str) -> None:
    match = engines.get("sglang").classify('INFO starting\nTraceback (most recent call last):\n  File "x.py"\n' + words + "\n")
    assert match.signature.category == category and match.lines[0].text == words
