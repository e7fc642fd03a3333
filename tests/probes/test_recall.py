"""Recall probe against the real llama-server (SmolLM2 recalls a pass key at 1K tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import handle, llama_server_process
from tuner.probes import RecallProbe
from tuner.space import RecallProbeSpec


@pytest.mark.integration
def test_recall_passes_within_context_and_stops_beyond_it(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 1536, "parallel": 1}) as server:
        server.wait_ready()
        spec = RecallProbeSpec(lengths=[1024, 2048], depths=[0.1, 0.9], seed=3)
        result = RecallProbe(spec).run(handle(server))
    table = result.details["table"]
    assert set(table) == {"1024"}  # 2048 does not fit a 1536-token slot: never sent
    assert result.details["stop_reason"] == "length 2048 does not fit the per-request context 1536"
    for case in table["1024"].values():
        assert case["passed"], case
        assert 900 <= case["prompt_tokens"] <= 1024
    assert result.metrics["effective_context"] == 1024
    assert result.metrics["recall@1024"] == 1.0
