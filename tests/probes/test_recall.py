"""Recall probe against the real llama-server (SmolLM2 recalls a pass key at 1K tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import tiny_space
from tuner import engines
from tuner.partitions import free_port
from tuner.probes import RecallProbe, ServerHandle
from tuner.server import ServerProcess
from tuner.space import RecallProbeSpec, validate


@pytest.mark.integration
def test_recall_passes_within_context_and_stops_beyond_it(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    space = validate(tiny_space(), "t.yaml")
    adapter = engines.get("llamacpp")
    port = free_port("127.0.0.1", 32500, 100)
    cmd = adapter.command({"ctx-size": 1536, "parallel": 1}, space=space, model_path=str(smollm2), port=port)
    with ServerProcess(cmd, adapter=adapter, log_path=tmp_path / "s.log", host="127.0.0.1", port=port, model=str(smollm2), startup_timeout=30) as server:
        server.wait_ready()
        cap = adapter.capacity(server.log_text(), None, None)
        spec = RecallProbeSpec(lengths=[1024, 2048], depths=[0.1, 0.9], seed=3)
        result = RecallProbe(spec).run(ServerHandle(server.url, str(smollm2), cap, "llamacpp"))
    table = result.details["table"]
    assert set(table) == {"1024"}  # 2048 does not fit a 1536-token slot: never sent
    assert result.details["stop_reason"] == "length 2048 does not fit the per-request context 1536"
    for case in table["1024"].values():
        assert case["passed"], case
        assert 900 <= case["prompt_tokens"] <= 1024
    assert result.metrics["effective_context"] == 1024
    assert result.metrics["recall@1024"] == 1.0
