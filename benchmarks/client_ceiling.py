"""Benchmark: the load client's ceiling on one core, closed loop and open loop.

Closed loop (default): the probe's own request loop (tuner.probes._stream.stream_request: httpx
asyncio, SSE parsing, JSON per event, timing per token) runs pinned to core 0 against a minimal
local SSE server pinned to the last core that writes pre-built events (cheap, so the client is the
bottleneck). Target >= 20,000 streamed tokens/s.

    python benchmarks/client_ceiling.py [concurrency] [tokens_per_request] [requests]

Open loop (``--open-loop``): the SLO probe's open loop (LoadProbe.rate_level: one sender process,
the probe's own parent beside it, both pinned to core 0) at doubling request rates, then bisected,
for streams of 64 and 256 tokens. Each rate is one level (window of --seconds); it prints the
delivered share of the schedule (achieved/offered), the send lag p99 and the server's CPU share of
its core (the server writes each event on its own; well under 100 %: it is not the bottleneck).
The ceiling of one core is the highest rate with achieved/offered >= 0.99 and a send lag p99
within the probe's own bound (tuner.probes.load.SEND_LAG_MAX: a loop uniformly late still sends
the count); the two ceilings give the cost model a sender is
planned by (tuner.probes._senders.CEILING: core-seconds per request and per streamed token).

    python benchmarks/client_ceiling.py --open-loop [--seconds 6] [--out ceiling.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.fault.sse_server import running
from tuner.base.records import Capacity
from tuner.host import procfs
from tuner.probes import CEILING, LoadProbe, Senders, ServerHandle
from tuner.probes.load import SEND_LAG_MAX, stream_request
from tuner.serving.server import end_servers_on_sigterm
from tuner.space import LoadProbeSpec


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
    server_cpu = str(cores[-1])
    with running(core=cores[-1]) as (url, _):
        os.sched_setaffinity(0, {cores[0]})
        asyncio.run(measure(url, concurrency, tokens, concurrency))  # warm up
        wall, chunks, errors = asyncio.run(measure(url, concurrency, tokens, requests))
    rate = chunks / wall
    print(
        f"client on core {cores[0]}, server on core {server_cpu}: {requests} requests x {tokens} tokens at concurrency "
        f"{concurrency}"
    )
    print(
        f"{chunks} streamed tokens in {wall:.2f}s, {errors} errors: {rate:,.0f} tok/s; ratio to the 20,000 target "
        f"{rate / 20000:.2f}"
    )


async def open_level(url: str, tokens: int, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """One open-loop level from one sender at ``rate``: the probe's own rate_level."""
    spec = LoadProbeSpec(prompt_tokens=8, output_tokens=tokens, duration=seconds, max_duration=seconds, warmup=1)
    probe = LoadProbe(spec)
    server = ServerHandle(url, "m", Capacity())
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        prompts = await probe.prompts(client, server)
    with Senders() as senders:
        return await probe.rate_level(senders, server, prompts, rate, seed=seed, cores=1)


def open_loop(seconds: float, out: Path | None) -> None:
    cores = sorted(os.sched_getaffinity(0))
    rows: list[dict[str, Any]] = []
    ceilings: dict[int, float] = {}
    with running("--each", core=cores[-1]) as (url, server_pid):  # one event per write, as an engine streams
        os.sched_setaffinity(0, {cores[0]})  # the parent and its sender share one client core, as in a trial
        print(
            f"open loop: one sender and its parent on core {cores[0]}, the SSE server on core {cores[-1]}, {seconds:g} s windows"
        )
        for tokens in (64, 256):
            held, failed, rate = 0.0, None, 50.0

            def level(rate: float, tokens: int = tokens) -> bool:
                before = procfs.stat(server_pid)
                summary = asyncio.run(open_level(url, tokens, rate, seconds, seed=len(rows)))
                after = procfs.stat(server_pid)
                busy = (after.cpu_seconds - before.cpu_seconds) if before and after else float("nan")
                wall = summary["window_s"] + summary["warmup_s"]
                ok = summary["achieved_over_offered"] >= 0.99 and (summary["send_lag_p99"] or 0) <= SEND_LAG_MAX
                row = {
                    "tokens": tokens, "rate": rate, "offered_rate": summary["offered_rate"],
                    "achieved_rate": summary["achieved_rate"], "achieved_over_offered": summary["achieved_over_offered"],
                    "send_lag_p99": summary["send_lag_p99"], "errors": summary["errors"],
                    "server_cpu_share": busy / max(wall, 1e-9), "delivers": ok,
                }  # fmt: skip
                rows.append(row)
                print(
                    f"  {tokens:>3} tokens at {rate:7.1f}/s: offered {row['offered_rate']:7.1f}/s, achieved "
                    f"{row['achieved_rate']:7.1f}/s ({row['achieved_over_offered']:.3f}), send lag p99 "
                    f"{(row['send_lag_p99'] or 0) * 1000:6.1f} ms, server CPU {row['server_cpu_share']:.0%} of its core, "
                    f"{summary['errors']:.0f} errors"
                )
                return ok

            while failed is None and rate <= 20000:
                if level(rate):
                    held, rate = rate, rate * 2
                else:
                    failed = rate
            while failed is not None and held and failed - held > 0.05 * held:
                mid = round((held + failed) / 2, 1)
                if level(mid):
                    held = mid
                else:
                    failed = mid
            ceilings[tokens] = held
            print(
                f"ceiling of one core at {tokens}-token streams: {held:g} requests/s "
                f"(achieved/offered >= 0.99, send lag p99 <= {SEND_LAG_MAX * 1000:.0f} ms)"
            )
    per_token = (1 / ceilings[256] - 1 / ceilings[64]) / (256 - 64)
    per_request = 1 / ceilings[64] - 64 * per_token
    print(f"cost model: {per_request * 1000:.3f} ms per request + {per_token * 1e6:.2f} us per streamed token (core time)")
    current = CEILING
    print(
        f"tuner.probes._senders.CEILING says {current.per_request_s * 1000:.3f} ms + {current.per_token_s * 1e6:.2f} us: "
        f"{current.rate(64):.0f}/s at 64 tokens against {ceilings[64]:g} measured (ratio {current.rate(64) / ceilings[64]:.2f})"
    )
    if out is not None:
        out.write_text(
            json.dumps({"rows": rows, "ceilings": ceilings, "per_request_s": per_request, "per_token_s": per_token}, indent=2)
            + "\n"
        )


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    if "--open-loop" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--open-loop", action="store_true")
        ap.add_argument("--seconds", type=float, default=6.0)
        ap.add_argument("--out", type=Path)
        ns = ap.parse_args()
        open_loop(ns.seconds, ns.out)
    else:
        args = [int(a) for a in sys.argv[1:]]
        main(*(args + [16, 1000, 160][len(args) :]))
