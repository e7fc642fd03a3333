"""A trace replayed by this tool and by SGLang's own bench on one fresh server (issue 46's
independent check): the same rows at the same pace, the same config, one after the other.

The space's workload is one Mooncake-format trace (``workload: {trace: ..., block: B}``). The
config (``--params``, JSON; default the space's first enqueued config) starts as a trial would
(:func:`tuner.serving.trial.serve`: its partition's server cores), and this process moves to the
partition's client cores, where every client below runs. Then, each on a drained server:

1. this tool's open loop replays the trace at ``--rate`` requests/s (its own times scaled to that
   rate: :meth:`tuner.workload.draw.Workload.arrivals`), one pass (rows / rate seconds);
2. SGLang's bench replays the same file (``--dataset-name mooncake --mooncake-slowdown-factor``
   own rate / ``--rate``, ``--num-prompts`` rows: one pass), pinned to the same cores;
   ``--seconds``: both replay the trace's first rate x seconds rows instead.

SGLang's bench builds its prompts from the hash ids alone (``input_length`` ignored: about 130
tokens a block, scripts/make-sglang-trace.py); replay a trace made by that script, whose
``input_length`` is what SGLang sends, with ``block`` as it printed. For both runs the server's
own counters (``sglang:prompt_tokens_total``, ``sglang:cached_tokens_total``,
``sglang:generation_tokens_total``; ``--enable-metrics``) are read before and after: the cache hit
rate and the output tokens of each run by one count. Prints per run: output tok/s, the server's
cache hit rate (this tool's also from ``usage``), what it delivered, TTFT and ITL p99; then the
ratio of the output rates and the difference of the hit rates. Writes trace-crosscheck.json.

    python benchmarks/trace_crosscheck.py --space search_spaces/h200-sglang-trace.yaml --rate 8 --out $OUT
    python benchmarks/trace_crosscheck.py --space S --rate R --out O --tool-only   # no SGLang (a CPU engine)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from goodput_crosscheck import first_partition, merge, sglang_result, stubs

from tuner.app.prepare import load
from tuner.engines import counter_total
from tuner.host.processes import terminate_group
from tuner.probes import Senders, ServerHandle
from tuner.probes.load import LoadProbe, Window
from tuner.serving.server import end_servers_on_sigterm
from tuner.serving.trial import serve
from tuner.workload.trace import read_trace

# SGLang 0.5.17's bench breaks on its own mooncake rows (serving.py reads ``input_requests[0].prompt``
# and, for the totals, ``.prompt_len``; the mooncake loader returns dicts): the rows as dicts that
# also answer those (no prompt: not multi-turn; their length: ``input_length``, which a trace made by
# scripts/make-sglang-trace.py sets to what SGLang's own prompt counts).
MOONCAKE_ROWS = """
import runpy
from sglang.benchmark.datasets import mooncake

class Row(dict):
    prompt = None
    vision_prompt_len = 0
    prompt_len = property(lambda self: self["input_length"])
    text_prompt_len = prompt_len

def load(self, *args, _load=mooncake.MooncakeDataset.load, **kwargs):
    return [Row(r) for r in _load(self, *args, **kwargs)]

mooncake.MooncakeDataset.load = load
runpy.run_module("sglang.benchmark.serving", run_name="__main__", alter_sys=True)
"""

COUNTERS = ("sglang:prompt_tokens", "sglang:cached_tokens", "sglang:generation_tokens")


async def counters(client: httpx.AsyncClient, server: ServerHandle) -> dict[str, float | None]:
    """The server's token counters now (None each where it exports none)."""
    try:
        reply = await client.get(f"{server.url}/metrics", headers=server.headers)
        text = reply.text if reply.status_code == 200 else ""
    except httpx.HTTPError:
        text = ""
    if "sglang:" not in text:
        return dict.fromkeys(COUNTERS)
    # a counter appears with its first count: absent where the server answered is none yet (on the
    # H100 the cached-token counter first appeared during this tool's replay, which read as 0 % hit)
    return {name: counter_total(text, name) or 0.0 for name in COUNTERS}


def by_counters(before: dict[str, float | None], after: dict[str, float | None], seconds: float) -> dict[str, float | None]:
    """What the server counted between two reads: its cache hit rate and output tokens a second."""
    delta = {k: (after[k] - before[k]) if after[k] is not None and before[k] is not None else None for k in COUNTERS}
    prompt, cached, output = (delta[k] for k in COUNTERS)
    return {
        "server_prompt_tokens": prompt,
        "server_cache_hit_rate": (cached or 0.0) / prompt if prompt else None,
        "server_output_tok_s": output / seconds if output is not None and seconds > 0 else None,
    }


async def tool_run(probe: LoadProbe, server: ServerHandle, rate: float, seconds: float) -> dict[str, Any]:
    """This tool's open loop at ``rate`` for ``seconds`` on a drained server, and the counters around it."""
    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0), trust_env=False) as client:
        source = await probe.prompts(client, server)
        await probe.settle(client, server)
        before = await counters(client, server)
        with Senders() as senders:
            level = await probe.rate_level(senders, server, source, rate, seed=0, window=Window(seconds, seconds, ci=False))
        await probe.settle(client, server)
        after = await counters(client, server)
    shown = ("output_tok_s", "cache_hit_rate", "cache_hit_allowed", "achieved_over_offered", "ttft_p99", "itl_p99")
    return {
        **{k: level.get(k) for k in shown},
        "prompt_tokens_mean": (level.get("prompt_tokens") or 0) / max(1, level.get("requests") or 1),
        "window_s": level.get("window_s"),
        **by_counters(before, after, level.get("window_s") or seconds),
    }


def bench_run(server: ServerHandle, trace: Path, slowdown: float, rows: int, out: Path, pin: tuple[int, ...]) -> dict[str, Any]:
    """SGLang's bench replaying ``trace`` once at ``slowdown`` x its own pace, pinned to ``pin``,
    with the server's counters around it."""
    argv = [
        sys.executable, "-c", MOONCAKE_ROWS, "--backend", "sglang", "--base-url", server.url,
        "--model", server.model, "--tokenizer", server.model, "--dataset-name", "mooncake", "--dataset-path", str(trace),
        "--mooncake-slowdown-factor", f"{slowdown:.6g}", "--mooncake-num-rounds", "1", "--num-prompts", str(rows),
        "--output-file", str(out / "bench-trace.jsonl"), "--output-details",
    ]  # fmt: skip
    taskset = ["taskset", "--cpu-list", ",".join(map(str, pin))] if pin else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(stubs(out)), os.environ.get("PYTHONPATH")) if p)}

    async def read() -> dict[str, float | None]:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await counters(client, server)

    before = asyncio.run(read())
    with (out / "bench-trace.log").open("w") as log:
        proc = subprocess.Popen([*taskset, *argv], stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            code = proc.wait()
        finally:
            terminate_group(proc.pid, term_timeout=5.0, proc=proc)
    if code != 0:
        raise RuntimeError(f"SGLang's bench exited {code}: see {out}/bench-trace.log")
    after = asyncio.run(read())
    result = sglang_result(out / "bench-trace.jsonl")
    merged = merge([result], rows / max(result["duration"], 1e-9))
    return {
        "output_tok_s": result["output_throughput"],
        "requests": result.get("completed"),
        "failed": result.get("failed"),
        "duration_s": result["duration"],
        "achieved_rate": merged.get("achieved_rate"),
        "ttft_p99": (merged.get("p99_ttft_ms") or 0.0) / 1000,
        "itl_p99": (merged.get("p99_itl_ms") or 0.0) / 1000,
        "prompt_tokens_mean": (result.get("total_input_tokens") or 0) / max(1, result.get("completed") or 1),
        **by_counters(before, after, result["duration"]),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--space", required=True, help="a space whose workload is one trace")
    ap.add_argument("--params", help="the config, JSON (default: the space's first enqueued config)")
    ap.add_argument("--rate", type=float, required=True, help="requests/s both replays run at")
    ap.add_argument("--seconds", type=float, help="each replay's length: the trace's first rate x seconds rows (default all)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tool-only", action="store_true", help="this tool's replay alone (no SGLang here)")
    args = ap.parse_args(argv)
    end_servers_on_sigterm()
    args.out.mkdir(parents=True, exist_ok=True)
    space, _ = load(args.space)
    workload = space.workload
    if workload is None or isinstance(workload, str) or not workload.replays:
        raise SystemExit(f"{args.space}: workload: one trace to replay is needed (workload: {{trace: ..., block: ...}})")
    trace = workload.traces[0]
    rows = read_trace(trace.trace, trace.block)
    span = (rows[-1].timestamp_ms - rows[0].timestamp_ms) / 1000
    own = (len(rows) - 1) / span
    count = min(len(rows), round(args.rate * args.seconds)) if args.seconds else len(rows)
    seconds = count / args.rate  # the first ``count`` rows, once
    params = json.loads(args.params) if args.params else dict(space.enqueue[0])
    partition = first_partition(space)
    load_spec = space.load_spec()
    assert load_spec is not None
    found: dict[str, Any] = {
        "space": args.space,
        "params": params,
        "rate": args.rate,
        "trace": str(trace.trace),
        "rows": count,
    }
    with serve(space, params, args.out / "server", partition) as served:
        if partition.client_cpus:
            os.sched_setaffinity(0, partition.client_cpus)  # every client below: the tool's senders, SGLang's bench
        found["tool"] = asyncio.run(tool_run(LoadProbe(load_spec), served.handle, args.rate, seconds))
        if not args.tool_only:
            (args.out / "trace-crosscheck.json").write_text(
                json.dumps(found, indent=2, default=str) + "\n"
            )  # kept if the bench fails
            found["bench"] = bench_run(served.handle, Path(trace.trace), own / args.rate, count, args.out, partition.client_cpus)
    (args.out / "trace-crosscheck.json").write_text(json.dumps(found, indent=2, default=str) + "\n")
    for who in ("tool", "bench"):
        r = found.get(who)
        if r is None:
            continue
        hit = r.get("server_cache_hit_rate")
        print(
            f"{who}: {r['output_tok_s'] or 0:,.1f} output tok/s (server: {r.get('server_output_tok_s') or 0:,.1f}), "
            f"cache hit {'-' if hit is None else f'{hit:.1%}'} by the server's counters, "
            f"TTFT p99 {r.get('ttft_p99') or 0:.3f} s, ITL p99 {(r.get('itl_p99') or 0) * 1000:.1f} ms, "
            f"prompts {r.get('prompt_tokens_mean') or 0:,.0f} tokens on average"
        )
    tool, bench = found["tool"], found.get("bench")
    print(
        f"tool: achieved/offered {tool.get('achieved_over_offered')}, cache hit by usage {tool.get('cache_hit_rate')} "
        f"of {tool.get('cache_hit_allowed')} the hash ids allow"
    )
    if bench:
        sent = f"{bench['achieved_rate'] or 0:.2f}/s delivered of {args.rate:g}"
        print(f"bench: {bench['requests']} requests, {bench['failed']} failed, {sent}")
        ratio = (tool["output_tok_s"] or 0) / bench["output_tok_s"] if bench["output_tok_s"] else None
        hits = (tool.get("server_cache_hit_rate"), bench.get("server_cache_hit_rate"))
        points = 100 * (hits[0] - hits[1]) if None not in hits else None  # type: ignore[operator]
        print(f"output tok/s tool / bench: {ratio}; cache hit tool - bench: {points} points (each by the server's counters)")


if __name__ == "__main__":
    main()
