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

``--gap S``: the server writes a stream's tokens S seconds apart, as an engine decodes (one read
per token on the client; without it, tokens written faster than they are read arrive together and
the per-token cost is a floor). The client's ITL p99 then also shows its own lag: ITL p99 - S is
how late the sender stamped a token, which inflates the ITL the SLO judges; with a gap, a rate
delivers only where that excess is within ``--itl-excess`` (default 5 ms) too.

    python benchmarks/client_ceiling.py --open-loop [--seconds 6] [--gap 0.01] [--tokens 64 256] [--out ceiling.json]
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


def open_loop(
    seconds: float, out: Path | None, gap: float = 0.0, lengths: tuple[int, int] = (64, 256), excess: float = 0.005
) -> None:
    cores = sorted(os.sched_getaffinity(0))
    rows: list[dict[str, Any]] = []
    ceilings: dict[int, float] = {}
    flags = ["--each", *(["--gap", str(gap)] if gap else [])]  # one event per write, as an engine streams
    with running(*flags, core=cores[-1]) as (url, server_pid):
        os.sched_setaffinity(0, {cores[0]})  # the parent and its sender share one client core, as in a trial
        print(
            f"open loop: one sender and its parent on core {cores[0]}, the SSE server on core {cores[-1]}, {seconds:g} s windows"
            + (f", tokens {gap * 1000:g} ms apart" if gap else "")
        )
        for tokens in lengths:
            held, failed, rate = 0.0, None, 10.0 if gap else 50.0

            def level(rate: float, tokens: int = tokens) -> bool:
                before = procfs.stat(server_pid)
                summary = asyncio.run(open_level(url, tokens, rate, seconds, seed=len(rows)))
                after = procfs.stat(server_pid)
                busy = (after.cpu_seconds - before.cpu_seconds) if before and after else float("nan")
                wall = summary["window_s"] + summary["warmup_s"]
                itl_excess = (summary.get("itl_p99") or 0.0) - gap if gap else None
                ok = summary["achieved_over_offered"] >= 0.99 and (summary["send_lag_p99"] or 0) <= SEND_LAG_MAX
                ok = ok and (itl_excess is None or itl_excess <= excess)
                row = {
                    "tokens": tokens, "rate": rate, "offered_rate": summary["offered_rate"],
                    "achieved_rate": summary["achieved_rate"], "achieved_over_offered": summary["achieved_over_offered"],
                    "send_lag_p99": summary["send_lag_p99"], "itl_p99": summary.get("itl_p99"), "gap": gap,
                    "itl_excess_p99": itl_excess, "errors": summary["errors"],
                    "server_cpu_share": busy / max(wall, 1e-9), "delivers": ok,
                }  # fmt: skip
                rows.append(row)
                itl = f", ITL p99 {gap * 1000:g} + {itl_excess * 1000:5.1f} ms" if itl_excess is not None else ""
                print(
                    f"  {tokens:>3} tokens at {rate:7.1f}/s: offered {row['offered_rate']:7.1f}/s, achieved "
                    f"{row['achieved_rate']:7.1f}/s ({row['achieved_over_offered']:.3f}), send lag p99 "
                    f"{(row['send_lag_p99'] or 0) * 1000:6.1f} ms{itl}, server CPU {row['server_cpu_share']:.0%} of its core, "
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
            bound = f", ITL p99 within {excess * 1000:g} ms of the gap" if gap else ""
            print(
                f"ceiling of one core at {tokens}-token streams: {held:g} requests/s "
                f"(achieved/offered >= 0.99, send lag p99 <= {SEND_LAG_MAX * 1000:.0f} ms{bound})"
            )
    short, long = sorted(ceilings)
    per_token = (1 / ceilings[long] - 1 / ceilings[short]) / (long - short)
    per_request = 1 / ceilings[short] - short * per_token
    print(f"cost model: {per_request * 1000:.3f} ms per request + {per_token * 1e6:.2f} us per streamed token (core time)")
    current = CEILING
    print(
        f"tuner.probes._senders.CEILING says {current.per_request_s * 1000:.3f} ms + {current.per_token_s * 1e6:.2f} us: "
        f"{current.rate(short):.0f}/s at {short} tokens against {ceilings[short]:g} measured "
        f"(ratio {current.rate(short) / ceilings[short]:.2f}), {current.rate(long):.0f}/s at {long} against "
        f"{ceilings[long]:g} ({current.rate(long) / ceilings[long]:.2f})"
    )
    if out is not None:
        kept = {"rows": rows, "ceilings": ceilings, "per_request_s": per_request, "per_token_s": per_token, "gap": gap}
        out.write_text(json.dumps(kept, indent=2) + "\n")


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    if "--open-loop" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--open-loop", action="store_true")
        ap.add_argument("--seconds", type=float, default=6.0)
        ap.add_argument("--out", type=Path)
        ap.add_argument("--gap", type=float, default=0.0, help="seconds between a stream's tokens (0: as fast as written)")
        ap.add_argument("--tokens", type=int, nargs=2, default=(64, 256), help="the two stream lengths")
        ap.add_argument("--itl-excess", type=float, default=0.005, help="with --gap: ITL p99 - gap a delivering rate allows")
        ns = ap.parse_args()
        open_loop(ns.seconds, ns.out, ns.gap, tuple(ns.tokens), ns.itl_excess)
    else:
        args = [int(a) for a in sys.argv[1:]]
        main(*(args + [16, 1000, 160][len(args) :]))
