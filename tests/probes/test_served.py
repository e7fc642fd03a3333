"""Served-context probe against the real llama-server: requests that fill the per-slot context,
side by side, of exactly the asked length; a context the server does not really serve fails."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import handle, llama_server_process, tiny_space
from tuner.app.prepare import validate
from tuner.probes import ServedContextProbe, from_space
from tuner.space.schema import ServedContextProbeSpec


@pytest.mark.integration
@pytest.mark.one_core
def test_full_context_at_concurrency_is_served_and_a_larger_claim_fails(
    tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 1024, "parallel": 2}) as server:
        server.wait_ready()
        real = handle(server)
        assert real.capacity.context_per_request == 512
        result = ServedContextProbe(ServedContextProbeSpec(output_tokens=8), default_concurrency=2).run(real)
        claimed = replace(real, capacity=replace(real.capacity, context_per_request=1024))  # more than a slot holds
        refused = ServedContextProbe(ServedContextProbeSpec(output_tokens=8, concurrency=2)).run(claimed)
        edge = replace(real, capacity=replace(real.capacity, context_per_request=515))  # the prompt fits, the output not
        cut = ServedContextProbe(ServedContextProbeSpec(output_tokens=8, concurrency=2)).run(edge)
    assert result.metrics["ok"] == 1.0 and result.metrics["context"] == 512 and result.metrics["requests"] == 2
    assert result.details["prompt_tokens_seen"] == [512 - 8] and result.metrics["truncated"] == 0, (
        result.details
    )  # exactly context - output
    assert refused.metrics["ok"] == 0.0 and refused.metrics["context"] == 0 and refused.metrics["errors"] == 2
    assert "HTTP 400" in refused.details["first_error"], refused.details
    # llama.cpp ends the output where the slot is full: what it served is the slot, not the claim
    assert cut.metrics["ok"] == 1.0 and cut.metrics["truncated"] == 2 and cut.metrics["context"] == 512, cut.metrics


def test_the_served_probe_defaults_to_the_load_target() -> None:
    raw = tiny_space()
    raw["probes"]["load"].update(concurrency=[1, 3], target=3)
    raw["probes"]["served"] = {}
    probes = {p.name: p for p in from_space(validate(raw, "t.yaml"))}
    assert probes["served"].concurrency == 3
    raw["probes"]["served"] = {"concurrency": 1}
    assert {p.name: p for p in from_space(validate(raw, "t.yaml"))}["served"].concurrency == 1
