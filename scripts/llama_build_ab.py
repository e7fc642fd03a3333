"""Benchmark: two llama-server builds on the same work, interleaved on fresh servers.

Each round starts a server of each build in turn (the tests' flags: SmolLM2-135M Q4_1, flash
attention, no warmup, no prompt cache), sends two warm-up requests, then REQUESTS completions of
PROMPT words in / OUTPUT tokens out (EOS ignored) at CONCURRENCY, and reads the wall time and the
server's own CPU-seconds from /proc. Prints output tok/s and server CPU-seconds per request of each
build (mean, min-max over the rounds) and their ratios B / A.

    python scripts/llama_build_ab.py A_BINARY B_BINARY [--threads 1] [--concurrency 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_space
from tuner import engines
from tuner.app.prepare import validate
from tuner.engines import llamacpp_provision as provision
from tuner.host import procfs
from tuner.host.partitions import free_port
from tuner.serving.server import ServerProcess, end_servers_on_sigterm

WORDS = "river stone cloud paper garden window silver forest candle market bridge winter".split()


def _cpu_s(pid: int) -> float:
    found = procfs.stat(pid)
    assert found is not None, f"server {pid} is gone"
    return found.cpu_seconds


def _prompt(i: int, words: int) -> str:
    return " ".join(WORDS[(i * 7 + k * 5) % len(WORDS)] + str((i * 31 + k) % 97) for k in range(words))


def one_server(binary: str, args: argparse.Namespace, model: str) -> tuple[float, float]:
    """(output tok/s, server CPU-s per request) of one fresh server."""
    port = free_port("127.0.0.1", 33400, 100)
    raw = tiny_space()
    raw["server"]["flags"]["threads"] = args.threads
    space = validate(raw, "bench.yaml")
    adapter = engines.get("llamacpp")
    params = {"ctx-size": 2048 * args.concurrency, "parallel": args.concurrency}
    cmd = adapter.command(params, space=space, model_path=model, port=port)
    default = str(provision.server_binary())
    cmd = replace(cmd, argv=tuple(binary if a == default else a for a in cmd.argv))
    assert binary in cmd.argv, cmd.argv
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerProcess(
            cmd, adapter=adapter, log_path=Path(tmp) / "s.log", host="127.0.0.1", port=port, model=model, startup_timeout=60
        ) as server,
        httpx.Client(base_url=server.url, timeout=300, trust_env=False) as client,
    ):
        server.wait_ready()

        def complete(i: int) -> int:
            body = {"prompt": _prompt(i, args.prompt), "n_predict": args.output, "ignore_eos": True, "cache_prompt": False}
            reply = client.post("/completion", json=body)
            reply.raise_for_status()
            return int(reply.json()["tokens_predicted"])

        for i in range(2):
            complete(10_000 + i)
        pid = server.pid
        cpu0, t0 = _cpu_s(pid), time.monotonic()
        with ThreadPoolExecutor(args.concurrency) as pool:
            tokens = sum(pool.map(complete, range(args.requests)))
        wall, cpu = time.monotonic() - t0, _cpu_s(pid) - cpu0
    return tokens / wall, cpu / args.requests


def main(argv: list[str] | None = None) -> dict[str, dict[str, list[float]]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=64, help="words per prompt")
    parser.add_argument("--output", type=int, default=48, help="tokens per completion")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    model = str(provision.model_file())
    results: dict[str, dict[str, list[float]]] = {b: {"tok_s": [], "cpu_per_request": []} for b in ("a", "b")}
    for r in range(args.rounds):
        for which in ("a", "b") if r % 2 == 0 else ("b", "a"):  # ABBA: drift cancels
            tok_s, cpu = one_server(getattr(args, which), args, model)
            results[which]["tok_s"].append(tok_s)
            results[which]["cpu_per_request"].append(cpu)
            print(f"round {r + 1} {which}: {tok_s:.1f} output tok/s, {cpu:.3f} server CPU-s per request", flush=True)

    def show(values: list[float]) -> str:
        return f"{statistics.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})"

    print(
        f"threads {args.threads}, concurrency {args.concurrency}, {args.prompt} words in / {args.output} tokens out, "
        f"{args.requests} requests, {args.rounds} rounds"
    )
    for which in ("a", "b"):
        got = results[which]
        print(f"{which} {getattr(args, which)}: tok/s {show(got['tok_s'])}, CPU-s/request {show(got['cpu_per_request'])}")
    a, b = results["a"], results["b"]
    print(f"ratio b/a tok/s: {statistics.mean(b['tok_s']) / statistics.mean(a['tok_s']):.3f}")
    print(f"ratio b/a CPU-s per request: {statistics.mean(b['cpu_per_request']) / statistics.mean(a['cpu_per_request']):.3f}")
    return results


if __name__ == "__main__":
    end_servers_on_sigterm()
    main()
