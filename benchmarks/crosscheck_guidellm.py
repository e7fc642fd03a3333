"""Benchmark: our load probe vs an independent load generator (guidellm, from PyPI) on the same
real llama-server and workload. Prints both output tok/s and their ratio (target within +-5 %).

Runs alternate ours, guidellm, guidellm, ours (ABBA) on one server so drift cancels. guidellm
lives in its own virtualenv (its pins clash with ours) and needs a Hugging Face tokenizer folder
offline: SmolLM2's, from shared/gpu/model-kit.tar.xz.

    python -m venv /tmp/gvenv && /tmp/gvenv/bin/pip install guidellm
    mkdir -p /tmp/mk && tar xJf ../shared/gpu/model-kit.tar.xz -C /tmp/mk
    python benchmarks/crosscheck_guidellm.py [--guidellm /tmp/gvenv/bin/guidellm] [--tokenizer /tmp/mk/tokenizer]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_space
from tuner import engines
from tuner.app.prepare import validate
from tuner.engines import llamacpp_provision as provision
from tuner.host.partitions import free_port
from tuner.probes import LoadProbe, ServerHandle
from tuner.serving.server import ServerProcess, end_servers_on_sigterm
from tuner.space import LoadProbeSpec

CONCURRENCY, PROMPT, OUTPUT, REQUESTS = 4, 128, 48, 16


def ours(url: str, model: str, duration: float = 30.0) -> float:
    spec = LoadProbeSpec(
        concurrency=[CONCURRENCY],
        prompt_tokens=PROMPT,
        output_tokens=OUTPUT,
        requests=REQUESTS,
        warmup=1,
        duration=duration,
        max_duration=max(duration, 2 * duration),
    )
    return LoadProbe(spec).run(ServerHandle(url, model, None)).metrics["output_tok_s"]  # type: ignore[arg-type]


def theirs(url: str, guidellm: str, tokenizer: str, tmp: Path) -> float:
    scenario = {
        "spec": {
            "backend": {"kind": "openai_http", "target": url, "model": tokenizer, "request_format": "/v1/completions"},
            "profile": {"kind": "concurrent", "streams": CONCURRENCY},
            "data": [{"kind": "synthetic_text", "prompt_tokens": PROMPT, "output_tokens": OUTPUT}],
            "constraints": [{"kind": "max_requests", "count": REQUESTS}],
            "outputs": [{"kind": "json", "path": str(tmp / "out.json")}],
        }
    }
    (tmp / "scenario.json").write_text(json.dumps(scenario))
    subprocess.run(
        [guidellm, "run", "--scenario", str(tmp / "scenario.json"), "--disable-console"],
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
    )
    data = json.loads((tmp / "out.json").read_text())
    return data["benchmarks"][0]["metrics"]["output_tokens_per_second"]["successful"]["mean"]


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--guidellm", default="/tmp/gvenv/bin/guidellm")
    parser.add_argument("--tokenizer", default="/tmp/mk/tokenizer")
    parser.add_argument("--duration", type=float, default=30.0, help="our probe's window, seconds")
    parser.add_argument("--skip-guidellm", action="store_true", help="only our side (the smoke test: CI has no guidellm)")
    args = parser.parse_args(argv)
    space = validate(tiny_space(), "bench.yaml")
    adapter = engines.get("llamacpp")
    model = str(provision.model_file())
    port = free_port("127.0.0.1", 33100, 100)
    cmd = adapter.command({"ctx-size": 4096, "parallel": CONCURRENCY}, space=space, model_path=model, port=port)
    results: dict[str, list[float]] = {"tuner": [], "guidellm": []}
    with (
        tempfile.TemporaryDirectory() as tmp,
        ServerProcess(
            cmd, adapter=adapter, log_path=Path(tmp) / "server.log", host="127.0.0.1", port=port, model=model, startup_timeout=30
        ) as server,
    ):
        server.wait_ready()
        for who in ("tuner", "guidellm", "guidellm", "tuner"):
            if who == "guidellm" and args.skip_guidellm:
                continue
            value = (
                ours(server.url, model, args.duration)
                if who == "tuner"
                else theirs(server.url, args.guidellm, args.tokenizer, Path(tmp))
            )
            results[who].append(value)
            print(f"{who:>8}: {value:.1f} output tok/s")
    if args.skip_guidellm:
        return results
    a, b = (sum(v) / len(v) for v in (results["tuner"], results["guidellm"]))
    print(
        f"llama-server -np {CONCURRENCY}, concurrency {CONCURRENCY}, {PROMPT} in / {OUTPUT} out, {REQUESTS} requests per run "
        "(ABBA)"
    )
    print(f"tuner {a:.1f} tok/s, guidellm {b:.1f} tok/s: ratio {a / b:.3f} (target 0.95-1.05)")
    return results


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    main()
