"""A trace replayed by this tool and by another tool on one fresh server (issue 46's independent
check): the same rows at the same pace, the same config, one after the other. The other tool is
SGLang's own bench (``--bench sglang``) or aiperf (``--bench aiperf``, any engine: it builds each
prompt from the trace's blocks at ``input_length`` tokens, as this tool does).

The space's workload is one Mooncake-format trace (``workload: {trace: ..., block: B}``). The
config (``--params``, JSON; default the space's first enqueued config) starts as a trial would
(:func:`tuner.serving.trial.serve`: its partition's server cores), and this process moves to the
partition's client cores, where every client below runs. Then, each on a drained server:

1. this tool's open loop replays the trace at ``--rate`` requests/s (its own times scaled to that
   rate: :meth:`tuner.workload.draw.Workload.arrivals`), one pass (the rows' span at that rate and
   one mean gap after the last);
2. SGLang's bench replays the same file (``--dataset-name mooncake --mooncake-slowdown-factor``
   own rate / ``--rate``, ``--num-prompts`` rows: one pass), pinned to the same cores; or aiperf
   replays the same rows with their times scaled to ``--rate`` (``--fixed-schedule``, the blocks at
   ``block`` tokens: ``--isl-block-size``), pinned to the same cores;
   ``--seconds``: both replay the trace's first rate x seconds rows instead.
   ``--repeats N``: N rounds, this tool first in even rounds and the other first in odd ones.

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

aiperf (PyPI, in its own virtualenv: its pins are not ours) needs a Hugging Face tokenizer folder,
offline: the served model's folder where it is one, else ``--tokenizer`` (SmolLM2's for the CPU's
GGUF: ``tar xJf ../shared/gpu/model-kit.tar.xz -C /tmp/mk``, then ``/tmp/mk/tokenizer``):

    python -m venv /tmp/aip && /tmp/aip/bin/pip install aiperf==0.13.0
    python scripts/make-agent-trace.py workloads/traces/agent-cpu-32.jsonl --block 32 --context 512 --output-max 24 --tail-id
    python benchmarks/trace_crosscheck.py --space benchmarks/spaces/cpu-trace-aiperf.yaml --rate 0.5 --seconds 120 \
        --bench aiperf --aiperf /tmp/aip/bin/aiperf --tokenizer /tmp/mk/tokenizer --repeats 3 --out /tmp/tc
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from goodput_crosscheck import first_partition, merge, pinned_clients, sglang_result, stubs

from tuner.app.prepare import load
from tuner.base.stats import percentiles
from tuner.engines import counter_total
from tuner.host.partitions import Partition
from tuner.probes import Senders, ServerHandle
from tuner.probes.load import LoadProbe, Window
from tuner.serving.server import end_servers_on_sigterm
from tuner.serving.trial import pinned, serve
from tuner.space import LoadProbeSpec, SearchSpace
from tuner.workload import TraceClass
from tuner.workload.trace import TraceRow, read_trace

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


def pinned_client(
    server: ServerHandle, argv: list[str], pin: tuple[int, ...], log: Path, env: dict[str, str]
) -> tuple[int, dict[str, float | None], dict[str, float | None]]:
    """Another tool's client run to its end, pinned to ``pin``, its output in ``log``, its whole
    process group ended after it: its exit code and the server's counters before and after."""

    async def read() -> dict[str, float | None]:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await counters(client, server)

    before = asyncio.run(read())
    (code,) = pinned_clients([(argv, log)], pin, env)
    return code, before, asyncio.run(read())


def bench_run(server: ServerHandle, trace: Path, slowdown: float, rows: int, out: Path, pin: tuple[int, ...]) -> dict[str, Any]:
    """SGLang's bench replaying ``trace`` once at ``slowdown`` x its own pace, pinned to ``pin``,
    with the server's counters around it."""
    argv = [
        sys.executable, "-c", MOONCAKE_ROWS, "--backend", "sglang", "--base-url", server.url,
        "--model", server.model, "--tokenizer", server.model, "--dataset-name", "mooncake", "--dataset-path", str(trace),
        "--mooncake-slowdown-factor", f"{slowdown:.6g}", "--mooncake-num-rounds", "1", "--num-prompts", str(rows),
        "--output-file", str(out / "bench-trace.jsonl"), "--output-details",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(stubs(out)), os.environ.get("PYTHONPATH")) if p)}
    code, before, after = pinned_client(server, argv, pin, out / "bench-trace.log", env)
    if code != 0:
        raise RuntimeError(f"SGLang's bench exited {code}: see {out}/bench-trace.log")
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


def scaled_trace(rows: tuple[TraceRow, ...], count: int, own: float, rate: float, path: Path) -> Path:
    """The trace's first ``count`` rows with their times scaled from ``own`` to ``rate`` requests/s
    (from 0), as this tool's open loop sends them: the file aiperf replays."""
    t0, factor = rows[0].timestamp_ms, own / rate
    scaled = [
        {"timestamp": round((r.timestamp_ms - t0) * factor, 3), "input_length": r.input_length,
         "output_length": r.output_length, "hash_ids": list(r.hash_ids)}
        for r in rows[:count]
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in scaled))
    return path


@functools.cache  # once per run: every round's aiperf reads the same entry
def tokenizer_cache(folder: Path, out: Path) -> tuple[dict[str, str], str]:
    """A Hugging Face tokenizer folder as an offline hub cache entry: aiperf 0.13's worker processes
    load tokenizers offline through the hub's snapshot lookup, which refuses a plain path. Returns
    the environment that points the hub there and the name to pass."""
    snapshot = out / "hf" / "models--local--tokenizer" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        if f.is_file() and (
            f.name.startswith("tokenizer")
            or f.suffix in (".jinja", ".model")
            or f.name in ("config.json", "special_tokens_map.json", "generation_config.json")
        ):
            (snapshot / f.name).write_bytes(f.read_bytes())
    (out / "hf" / "models--local--tokenizer" / "refs").mkdir(exist_ok=True)
    (out / "hf" / "models--local--tokenizer" / "refs" / "main").write_text("0" * 40)
    return {"HF_HUB_CACHE": str(out / "hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, "local/tokenizer"


def aiperf_result(art: Path, schedule: list[float], window: float) -> dict[str, Any]:
    """What aiperf reports of its run (its JSON export) and what it sent: the achieved rate and how
    late it sent, from its per-request records (the n-th ``request_start_ns`` after the first
    against the n-th scheduled time after the first: ``schedule``, seconds). ``output_tok_s`` is its
    output tokens over ``window``, the seconds this tool's level counts, as this tool counts them;
    aiperf's own figure (over its first send to its last answer) is ``aiperf_output_tok_s``."""
    found = json.loads((art / "profile_export_aiperf.json").read_text())
    records = [json.loads(line) for line in (art / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    starts = sorted(r["metadata"]["request_start_ns"] for r in records if r["metadata"].get("benchmark_phase") == "profiling")
    achieved = (len(starts) - 1) / ((starts[-1] - starts[0]) / 1e9) if len(starts) > 1 and starts[-1] > starts[0] else None
    lag = [(t - starts[0]) / 1e9 - (at - schedule[0]) for t, at in zip(starts, schedule, strict=False)]
    prompt = (found.get("total_usage_prompt_tokens") or {}).get("avg")
    cached = (found.get("total_usage_prompt_cache_read_tokens") or {}).get("avg")

    def p99(key: str) -> float | None:
        value = (found.get(key) or {}).get("p99")
        return value / 1000 if value is not None else None

    return {
        "output_tok_s": (found.get("total_output_tokens") or {}).get("avg", 0.0) / window,
        "aiperf_output_tok_s": (found.get("output_token_throughput") or {}).get("avg"),
        "requests": (found.get("completed_request_count") or found.get("request_count") or {}).get("avg"),
        "failed": (found.get("error_request_count") or {}).get("avg", 0),
        "duration_s": (found.get("benchmark_duration") or {}).get("avg"),
        "achieved_rate": achieved,
        "sent": len(starts),
        "send_lag_p99": percentiles(lag, [99])[99] if lag else None,
        "ttft_p99": p99("time_to_first_token"),
        # every gap between two chunks, as this tool's ITL (aiperf's inter_token_latency is one mean per request)
        "itl_p99": p99("inter_chunk_latency"),
        "scheduled_rate": (len(schedule) - 1) / (schedule[-1] - schedule[0]) if schedule[-1] > schedule[0] else None,
        "prompt_tokens_mean": (found.get("usage_prompt_tokens") or {}).get("avg"),
        "cache_hit_rate": cached / prompt if prompt and cached is not None else None,
    }


@dataclass(frozen=True)
class Replay:
    """What every round replays, worked out once: the trace, the load probe that sends it, the
    file aiperf replays, the trace's own rate, the rows sent and the window they take at the rate."""

    trace: TraceClass
    load: LoadProbeSpec
    scaled: Path
    own: float
    count: int
    seconds: float


def aiperf_run(
    server: ServerHandle, replay: Replay, tool: tuple[str, dict[str, str], str], out: Path, pin: tuple[int, ...]
) -> dict[str, Any]:
    """aiperf replaying ``replay.scaled`` (times already at the rate) on its fixed schedule,
    streamed, output lengths forced (``ignore_eos``, as this tool asks), pinned to ``pin``, with the
    server's counters around it. ``tool``: the aiperf executable, and the environment and name that
    find its tokenizer (:func:`tokenizer_cache`)."""
    scaled, api = replay.scaled, replay.load.api
    aiperf, env, name = tool
    art = out / "aiperf"
    argv = [
        aiperf, "profile", "--model", server.model, "--tokenizer", name, "--url", server.url,
        "--endpoint-type", "chat" if api == "chat" else "completions", "--streaming",
        "--custom-dataset-type", "mooncake_trace", "--input-file", str(scaled), "--isl-block-size", str(replay.trace.block),
        "--fixed-schedule", "--extra-inputs", "ignore_eos:true", "--artifact-dir", str(art), "--ui-type", "none",
    ]  # fmt: skip
    if server.headers.get("Authorization"):  # aiperf takes a key on its command line, which ps and its own log show
        raise SystemExit("aiperf: the server asks for an API key, which aiperf would show in its log: check a server without one")
    code, before, after = pinned_client(server, argv, pin, out / "aiperf.log", {**os.environ, **env})
    if code != 0 or not (art / "profile_export_aiperf.json").exists():
        raise RuntimeError(f"aiperf exited {code}: see {out}/aiperf.log")
    schedule = [json.loads(line)["timestamp"] / 1000 for line in scaled.read_text().splitlines()]
    result = aiperf_result(art, schedule, replay.seconds)
    return {**result, **by_counters(before, after, result["duration_s"] or 1.0)}


def client_cores(partition: Partition) -> tuple[int, ...]:
    """Where every client runs: a GPU partition's client cores; a CPU partition's server owns its
    devices, so the clients get this process's other cores (none left: unpinned)."""
    if partition.client_cpus:
        return tuple(partition.client_cpus)
    if partition.kind == "cpu":
        return tuple(sorted(os.sched_getaffinity(0) - set(partition.devices)))
    return ()


def summarize(rounds: list[dict[str, Any]], rate: float, other: str) -> list[str]:
    """Per round: each client's figures; then the ratio of output rates and the difference of cache
    hit rates (the server's counters where it has them, else each client's ``usage``), over rounds."""
    lines, ratios, points = [], [], []
    for i, found in enumerate(rounds):
        for who in ("tool", "bench"):
            r = found.get(who)
            if r is None:
                continue
            hit, usage = r.get("server_cache_hit_rate"), r.get("cache_hit_rate")
            served = r.get("server_output_tok_s")
            lines.append(
                f"round {i} {who if who == 'tool' else other}: {r['output_tok_s'] or 0:,.1f} output tok/s "
                f"(server: {'-' if served is None else f'{served:,.1f}'}), cache hit {'-' if hit is None else f'{hit:.1%}'} "
                f"by the server's counters, {'-' if usage is None else f'{usage:.1%}'} by usage, "
                f"TTFT p99 {r.get('ttft_p99') or 0:.3f} s, ITL p99 {(r.get('itl_p99') or 0) * 1000:.1f} ms, "
                f"prompts {r.get('prompt_tokens_mean') or 0:,.1f} tokens on average"
            )
        tool, bench = found["tool"], found.get("bench")
        lines.append(
            f"round {i} tool: achieved/offered {tool.get('achieved_over_offered')}, cache hit by usage "
            f"{tool.get('cache_hit_rate')} of {tool.get('cache_hit_allowed')} the hash ids allow"
        )
        if not bench:
            continue
        lines.append(
            f"round {i} {other}: {bench['requests']} requests, {bench['failed']} failed, "
            f"{bench['achieved_rate'] or 0:.3f}/s delivered of {bench.get('scheduled_rate') or rate:.3f} scheduled"
            + (f", sent late by {bench['send_lag_p99'] * 1000:.0f} ms at p99" if bench.get("send_lag_p99") is not None else "")
        )
        if bench["output_tok_s"]:
            ratios.append((tool["output_tok_s"] or 0) / bench["output_tok_s"])
        key = (
            "server_cache_hit_rate"
            if None not in (tool.get("server_cache_hit_rate"), bench.get("server_cache_hit_rate"))
            else "cache_hit_rate"
        )
        if None not in (tool.get(key), bench.get(key)):
            points.append(100 * (tool[key] - bench[key]))
    if ratios:
        lines.append(
            f"output tok/s tool / {other}: mean {sum(ratios) / len(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, "
            f"{len(ratios)} round(s)); cache hit tool - {other}: "
            + (
                f"mean {sum(points) / len(points):+.1f} points (min {min(points):+.1f}, max {max(points):+.1f})"
                if points
                else "-"
            )
        )
    return lines


def one_round(
    args: argparse.Namespace,
    space: SearchSpace,
    params: dict[str, Any],
    partition: Partition,
    pin: tuple[int, ...],
    i: int,
    found: dict[str, Any],
    replay: Replay,
) -> None:
    """Round ``i`` on a fresh server: this tool's replay and the other tool's, in the round's order,
    each stored in ``found`` (and its file) as it ends, so that a failure keeps what ran."""
    here, got = args.out / f"round-{i}", found["rounds"][i]
    here.mkdir(exist_ok=True)
    with serve(space, params, here / "server", partition) as served, pinned(pin):  # every client: ours, the other tool
        server = served.handle
        for who in ("tool", "bench") if i % 2 == 0 else ("bench", "tool"):
            if who == "tool":
                got["tool"] = asyncio.run(tool_run(LoadProbe(replay.load), server, args.rate, replay.seconds))
            elif args.tool_only:
                continue
            elif args.bench == "sglang":
                got["bench"] = bench_run(server, Path(replay.trace.trace), replay.own / args.rate, replay.count, here, pin)
            else:
                tokenizer = args.tokenizer or (Path(server.model) if Path(server.model).is_dir() else None)
                if tokenizer is None:
                    raise SystemExit(f"aiperf needs a tokenizer folder: --tokenizer (the served model {server.model} is not one)")
                tool = (args.aiperf, *tokenizer_cache(tokenizer, args.out))
                got["bench"] = aiperf_run(server, replay, tool, here, pin)
            (args.out / "trace-crosscheck.json").write_text(json.dumps(found, indent=2, default=str) + "\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--space", required=True, help="a space whose workload is one trace")
    ap.add_argument("--params", help="the config, JSON (default: the space's first enqueued config)")
    ap.add_argument("--rate", type=float, required=True, help="requests/s both replays run at")
    ap.add_argument("--seconds", type=float, help="each replay's length: the trace's first rate x seconds rows (default all)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bench", choices=("sglang", "aiperf"), default="sglang", help="the other tool")
    ap.add_argument("--tool-only", action="store_true", help="this tool's replay alone")
    ap.add_argument("--aiperf", default="aiperf", help="aiperf's executable (its own virtualenv)")
    ap.add_argument("--tokenizer", type=Path, help="aiperf: a Hugging Face tokenizer folder (default: the served model's)")
    ap.add_argument("--repeats", type=int, default=1, help="rounds, each on a fresh server; the order alternates")
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
    # the first ``count`` rows at the rate, and the mean gap after the last: each row once
    replayed = (rows[count - 1].timestamp_ms - rows[0].timestamp_ms) / 1000 * own / args.rate
    seconds = replayed * count / (count - 1) if count > 1 else 1 / args.rate
    params = json.loads(args.params) if args.params else dict(space.enqueue[0])
    partition = first_partition(space)
    load_spec = space.load_spec()
    assert load_spec is not None
    pin = client_cores(partition)
    found: dict[str, Any] = {
        "space": args.space, "params": params, "rate": args.rate, "trace": str(trace.trace), "rows": count,
        "bench_tool": None if args.tool_only else args.bench, "client_cores": list(pin), "rounds": [],
    }  # fmt: skip
    scaled = scaled_trace(rows, count, own, args.rate, args.out / "trace-at-rate.jsonl")
    replay = Replay(trace, load_spec, scaled, own, count, seconds)
    for i in range(args.repeats):
        found["rounds"].append({})
        one_round(args, space, params, partition, pin, i, found, replay)
    lines = summarize(found["rounds"], args.rate, args.bench)
    found["summary"] = lines
    (args.out / "trace-crosscheck.json").write_text(json.dumps(found, indent=2, default=str) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
