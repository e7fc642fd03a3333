"""Recall probe against the real llama-server (SmolLM2 recalls a pass key at 1K tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import handle, llama_server_process
from tuner.base.exceptions import ProbeError
from tuner.probes import RecallProbe
from tuner.probes.recall import ladder
from tuner.space import RecallProbeSpec


@pytest.mark.integration
@pytest.mark.one_core
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
        assert 900 <= case["prompt_tokens"] <= 1024 - 16  # a rung is the whole request: prompt and answer
    assert result.metrics["effective_context"] == 1024
    assert result.metrics["recall@1024"] == 1.0


def test_the_auto_ladder_climbs_to_the_configured_context() -> None:
    spec = RecallProbeSpec(start=1024)
    assert ladder(spec, 7936) == [1024, 2048, 4096, 7936]
    assert ladder(spec, 4096) == [1024, 2048, 4096]
    assert ladder(spec, 512) == [512]
    assert ladder(RecallProbeSpec(lengths=[1024, 2048]), 512) == [1024, 2048]  # a fixed ladder is kept as given
    with pytest.raises(ProbeError, match="no per-request context"):
        ladder(spec, None)
    with pytest.raises(ValueError, match="unique and ascending"):
        RecallProbeSpec(lengths=[2048, 1024])


@pytest.mark.integration
@pytest.mark.one_core
def test_auto_ladder_verifies_the_configured_context_with_distractors(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 768, "parallel": 1}) as server:
        server.wait_ready()
        spec = RecallProbeSpec(start=512, depths=[0.5], repeats=2, distractors=3, seed=5)
        result = RecallProbe(spec).run(handle(server))
    assert result.details["ladder"] == [512, 768]  # doubling, then the slot itself (not a power of two)
    table = result.details["table"]
    assert set(table.get("512", {})) == {"0.5/0", "0.5/1"}, table
    for length, row in table.items():
        for case in row.values():
            assert case["prompt_tokens"] is not None and case["prompt_tokens"] <= int(length) - 16, (length, case)
    assert result.metrics["cases"] == 2 * len(table)
    assert "recall@512" not in result.metrics and result.metrics["context_limit"] == 768
    # what it recalls, never more than it was told: the last rung passed before the first miss
    verified = 0
    for length in result.details["ladder"]:
        if result.details["recall"].get(str(length)) != 1.0:
            break
        verified = length
    assert result.metrics["effective_context"] == verified <= 768
