"""Benchmark: the load client's ceiling in streamed tokens/s on one core.

The probe's own request loop (tuner.probes._stream.stream_request: httpx asyncio, SSE parsing, JSON
per event, timing per token) runs pinned to core 0 against a minimal local SSE server pinned to
core 1 that writes pre-built events (cheap, so the client is the bottleneck). Target >= 20,000.

    python benchmarks/client_ceiling.py [concurrency] [tokens_per_request] [requests]
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tuner.partitions import free_port
from tuner.probes.load import stream_request
from tuner.server import end_servers_on_sigterm


async def measure(url: str, concurrency: int, tokens: int, requests: int) -> tuple[float, int, int]:
    body = {
        "model": "m",
        "prompt": "hello world",
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    pending = list(range(requests))
    records = []
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    async with httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) as client:

        async def worker() -> None:
            while pending:
                pending.pop()
                records.append(await stream_request(client, f"{url}/v1/completions", body, {}))

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - began
    ok = [r for r in records if r.ok]
    return wall, sum(r.chunks for r in ok), len(records) - len(ok)


def main(concurrency: int, tokens: int, requests: int) -> None:
    cores = sorted(os.sched_getaffinity(0))
    port = free_port("127.0.0.1", 33000, 100)
    server_cpu = str(cores[-1])
    server = subprocess.Popen(
        ["taskset", "--cpu-list", server_cpu, sys.executable, str(ROOT / "tests/fault/sse_server.py"), "--port", str(port)],
        start_new_session=True,
    )
    try:
        os.sched_setaffinity(0, {cores[0]})
        url = f"http://127.0.0.1:{port}"
        for _ in range(50):
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        asyncio.run(measure(url, concurrency, tokens, concurrency))  # warm up
        wall, chunks, errors = asyncio.run(measure(url, concurrency, tokens, requests))
    finally:
        os.killpg(server.pid, 15)
        server.wait()
    rate = chunks / wall
    print(
        f"client on core {cores[0]}, server on core {server_cpu}: {requests} requests x {tokens} tokens at concurrency "
        f"{concurrency}"
    )
    print(
        f"{chunks} streamed tokens in {wall:.2f}s, {errors} errors: {rate:,.0f} tok/s; ratio to the 20,000 target "
        f"{rate / 20000:.2f}"
    )


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [16, 1000, 160][len(args) :]))
