"""Overload probe: the real llama-server queues without bound; a fault injector rejects fast."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.conftest import handle, llama_server_process, worker_port
from tests.fault.sse_server import serve
from tuner.base.level import levels_in
from tuner.base.records import Capacity
from tuner.host.partitions import free_port
from tuner.probes import LoadProbe, OverloadProbe, ServerHandle
from tuner.space import LoadProbeSpec, OverloadProbeSpec


@pytest.fixture()
def fault_server(request: pytest.FixtureRequest):
    mode, capacity, hold = request.param
    port = free_port("127.0.0.1", worker_port(32700), 100)
    server = serve(port, mode, capacity, hold)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("fault_server", [("reject", 2, 0.5)], indirect=True)
def test_fast_rejections_are_counted(fault_server: str) -> None:
    handle = ServerHandle(fault_server, "m", Capacity(max_running_requests=2))
    result = OverloadProbe(OverloadProbeSpec(factor=3.0, prompt_tokens=8, output_tokens=4)).run(handle)
    m = result.metrics
    assert m["burst"] == 6
    assert m["rejected"] == 4 and m["completed"] == 2
    assert m["unbounded_queue"] == 0
    assert "429" in result.details["first_rejection"]


@pytest.mark.parametrize("fault_server", [("midstream", 99, 0.0)], indirect=True)
def test_a_500_mid_stream_is_an_error_not_a_latency(fault_server: str) -> None:
    handle = ServerHandle(fault_server, "m", Capacity())
    result = LoadProbe(LoadProbeSpec(concurrency=[2], prompt_tokens=8, output_tokens=10, duration=1, max_duration=2)).run(handle)
    level = levels_in(result.details)["2"]
    assert (level.errors or 0) >= 2 and level.error_rate == 1.0 and (level.window_s or 0) < 1.5  # stopped at once
    assert "stream error" in (level.first_error or "")
    assert level.ttft_p50 is None and level.output_tokens == 0
    assert result.details["stop_reason"].startswith("error rate 100%")


@pytest.mark.integration
@pytest.mark.one_core
def test_llama_server_queues_a_burst_without_bound(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    with llama_server_process(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2}) as server:
        server.wait_ready()
        result = OverloadProbe(OverloadProbeSpec(prompt_tokens=16, output_tokens=16)).run(handle(server))
    m = result.metrics
    assert m["burst"] == 4 and m["completed"] == 4 and m["rejected"] == 0
    assert m["unbounded_queue"] == 1 and "unbounded" in result.details["warning"]
    assert m["queue_wait_max"] > 0
