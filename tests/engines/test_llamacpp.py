"""llama.cpp signatures and capacity, on real logs captured from llama-server (tests/fixtures/llamacpp/)."""

from __future__ import annotations

import pytest

from tests.conftest import FIXTURES, tiny_space
from tuner import engines
from tuner.app.prepare import validate
from tuner.engines import Category

LOGS = FIXTURES / "llamacpp"
adapter = engines.get("llamacpp")


@pytest.mark.parametrize(
    ("log", "signature", "category", "words"),
    [
        ("kv_oom.log", "kv_cache_oom", Category.KV_CACHE, "insufficient memory (attempted to allocate 1440.00 MB)"),
        ("bad_flag.log", "bad_flag", Category.BAD_FLAG, "Unsupported cache type: q9_9"),
        ("unknown_flag.log", "bad_flag", Category.BAD_FLAG, "invalid argument: --parralel"),
        ("quant_v_no_fa.log", "quantized_v_needs_flash_attn", Category.BAD_FLAG, "requires flash_attn"),
        ("port_in_use.log", "port_in_use", Category.PORT_IN_USE, "couldn't bind HTTP server socket"),
        ("threads_at_cap.log", "threads_over_memory_cap", Category.OUT_OF_MEMORY, "Resource temporarily unavailable"),
    ],
)
def test_real_failure_logs_are_classified(log: str, signature: str, category: str, words: str) -> None:
    match = adapter.classify((LOGS / log).read_text())
    assert match is not None
    assert match.signature.name == signature
    assert match.signature.category == category
    assert any(words in line.text for line in match.lines)
    assert all(line.number >= 1 for line in match.lines)


def test_successful_startup_has_no_signature() -> None:
    assert adapter.classify((LOGS / "ok_startup.log").read_text()) is None


def test_capacity_from_real_log() -> None:
    cap = adapter.capacity((LOGS / "ok_startup.log").read_text(), None, None)
    assert cap.max_running_requests == 2
    assert cap.context_per_request == 2048
    assert cap.kv_tokens == 4096  # not unified: 2 slots x 2048
    assert cap.sources["log"]["kv_unified"] is False


def test_capacity_takes_the_last_line() -> None:
    text = (
        "load_model: initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'true'\n"
        "load_model: initializing, n_slots = 2, n_ctx_slot = 1024, kv_unified = 'false'\n"
    )
    cap = adapter.capacity(text, None, None)
    assert (cap.max_running_requests, cap.context_per_request, cap.kv_tokens) == (2, 1024, 2048)


def test_unified_kv_pool_is_shared() -> None:
    cap = adapter.capacity("initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'true'", None, None)
    assert cap.kv_tokens == 8192


def test_command_is_an_argv_list_with_flags_rendered_once() -> None:
    space = validate(tiny_space(), "t.yaml")
    cmd = adapter.command({"ctx-size": 4096, "parallel": 2}, space=space, model_path="/m.gguf", port=31000)
    argv = list(cmd.argv)
    assert argv[argv.index("--ctx-size") + 1] == "4096"
    assert argv[argv.index("--port") + 1] == "31000"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--no-warmup" in argv and argv.count("--ctx-size") == 1


def test_secrets_are_redacted_from_the_shell_line() -> None:
    space = validate(tiny_space(), "t.yaml")
    cmd = adapter.command({}, space=space, model_path="/m.gguf", port=1, secrets=("sk-secret",))
    cmd = type(cmd)((*cmd.argv, "--api-key", "sk-secret"), cmd.env, cmd.secrets)
    assert "sk-secret" not in cmd.shell_line()
    assert "***" in cmd.shell_line()


def test_a_memory_cap_limits_mallocs_arenas_unless_the_space_says_otherwise() -> None:
    capped = validate(tiny_space(), "t.yaml")
    assert capped.server.memory_cap == 1 << 30
    assert adapter.command({}, space=capped, model_path="/m.gguf", port=1).env == {"MALLOC_ARENA_MAX": "2"}
    raw = tiny_space()
    raw["server"]["env"] = {"MALLOC_ARENA_MAX": "4"}
    own = validate(raw, "t.yaml")
    assert adapter.command({}, space=own, model_path="/m.gguf", port=1).env == {"MALLOC_ARENA_MAX": "4"}
    raw["server"].update(memory_cap=None, env={})
    uncapped = validate(raw, "t.yaml")
    assert adapter.command({}, space=uncapped, model_path="/m.gguf", port=1).env == {}
