"""A memory-capped llama-server under an open loop: its threads and reserved address space.

    python scripts/capped_server_threads.py 20            # the space's env: MALLOC_ARENA_MAX=2
    python scripts/capped_server_threads.py 20 --arenas 0  # glibc's default arenas (8 per core)

The tests' llama-server (2 slots, 1 thread, RLIMIT_AS 1 GiB) serves three open-loop levels, at a
quarter of, at, and at twice ``rate`` requests/s (48-token prompts, 24 tokens out, 3 s windows), while
/proc/PID/status is read every 50 ms. Prints each level's offered rate and error rate, whether the
server died, and the most threads and VmSize seen (docs/test-suite.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import handle, llama_server_process
from tuner.engines import llamacpp_provision as provision
from tuner.probes.load import LoadProbe, LoadProbeSpec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rate", type=float)
    parser.add_argument("--arenas", default="2", help="MALLOC_ARENA_MAX for the server; 0: glibc's default")
    args = parser.parse_args()
    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    def watch(pid: int) -> None:
        while not stop.is_set():
            try:
                status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
                samples.append((int(status["Threads"]), int(status["VmSize"].split()[0]) // 1024))
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.05)

    load = LoadProbeSpec(concurrency=[1], prompt_tokens=48, output_tokens=24, duration=3, max_duration=4, warmup=2)
    with tempfile.TemporaryDirectory() as log_dir:
        server = llama_server_process(Path(log_dir), provision.model_file(), {"ctx-size": 2048, "parallel": 2})
        env = dict(server.command.env)
        env.pop("MALLOC_ARENA_MAX", None)
        if args.arenas != "0":
            env["MALLOC_ARENA_MAX"] = args.arenas
        server.command = type(server.command)(server.command.argv, env, server.command.secrets)
        with server:
            server.wait_ready()
            watcher = threading.Thread(target=watch, args=(server.pid,))
            watcher.start()
            probe = LoadProbe(load)

            async def levels() -> list[dict]:
                async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
                    prompts = await probe.prompts(client, handle(server))
                    return [
                        await probe.rate_level(client, handle(server), prompts, rate, seed=8)
                        for rate in (args.rate / 4, args.rate, args.rate * 2)
                    ]

            try:
                for level in asyncio.run(levels()):
                    rate, errors, cap = level["offered_rate"], level["error_rate"], level["in_flight_cap"]
                    print(f"offered {rate:g}/s  error_rate {errors:g}  cap {cap}")
            except httpx.HTTPError as exc:
                print(f"the probe failed: {exc!r}")
            finally:
                stop.set()
                watcher.join()
            died = server.died()
    print(f"MALLOC_ARENA_MAX={env.get('MALLOC_ARENA_MAX', 'unset')}  died={died}")
    (threads, size), most = samples[0], [max(column) for column in zip(*samples, strict=True)]
    print(f"threads {threads} -> max {most[0]}; VmSize {size} -> max {most[1]} MiB")


if __name__ == "__main__":
    main()
