"""Measurement: does the recall probe tell f16 KV from quantized KV on the real engine?

SmolLM2-135M on llama-server (ctx 8192, 1 slot, flash attention on so quantized V is allowed),
pass-key recall at a ladder of lengths x depths, once per KV cache type. Prints the pass table
and the effective context (the ladder stops at the first failing length, as in a tune).

    python benchmarks/recall_kv.py [lengths, default 1024,2048,4096,7168] [threads, default 2]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import tiny_space
from tuner import engines
from tuner.app.prepare import validate
from tuner.engines import llamacpp_provision as provision
from tuner.host.partitions import free_port
from tuner.probes import RecallProbe, ServerHandle
from tuner.serving.server import ServerProcess, end_servers_on_sigterm
from tuner.space import RecallProbeSpec

CACHE_TYPES = ("f16", "q8_0", "q4_0")


def main(lengths: list[int], threads: int) -> None:
    raw = tiny_space()
    raw["server"]["flags"]["threads"] = threads
    raw["server"]["memory_cap"] = "4GiB"
    space = validate(raw, "bench.yaml")
    adapter = engines.get("llamacpp")
    model = str(provision.model_file())
    spec = RecallProbeSpec(lengths=lengths, depths=[0.1, 0.5, 0.9], seed=7, threshold=1.0)
    for kv in CACHE_TYPES:
        port = free_port("127.0.0.1", 33200, 100)
        params = {"ctx-size": 8192, "parallel": 1, "cache-type-k": kv, "cache-type-v": kv}
        cmd = adapter.command(params, space=space, model_path=model, port=port)
        began = time.monotonic()
        with (
            tempfile.TemporaryDirectory() as tmp,
            ServerProcess(
                cmd, adapter=adapter, log_path=Path(tmp) / "s.log", host="127.0.0.1", port=port, model=model, startup_timeout=60
            ) as server,
        ):
            server.wait_ready()
            cap = adapter.capacity(server.log_text(), None, None)
            result = RecallProbe(spec).run(ServerHandle(server.url, model, cap))
        table = result.details["table"]
        cells = "  ".join(
            f"{length}: " + "".join("P" if c["passed"] else "-" for c in row.values()) for length, row in table.items()
        )
        print(
            f"K/V {kv:>5}: effective context {result.metrics['effective_context']:>6.0f}  [{cells}]  "
            f"({result.metrics['passed']:.0f}/{result.metrics['cases']:.0f} cases, {time.monotonic() - began:.0f}s) stop: "
            f"{result.details['stop_reason']}"
        )
        for length, row in table.items():
            for depth, case in row.items():
                if not case["passed"]:
                    print(
                        f"      miss at {length} tokens, depth {depth}: expected {case['expected']}, answered {case['answer']!r}"
                    )


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    lens = [int(v) for v in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1024, 2048, 4096, 7168]
    main(lens, int(sys.argv[2]) if len(sys.argv) > 2 else 2)
