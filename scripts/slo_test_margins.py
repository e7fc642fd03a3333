"""The closed-loop SLO test's margins on this machine (tests/probes/test_slo.py): on one real
llama-server (2 slots, SmolLM2), 1, 2 and 3 clients of 32/64 tokens, 3-4-s windows, REPEATS times;
prints each run's 2 and 3 clients' TTFT p99 beside the target the test sets (solo TTFT + half the
solo E2E) and the one it set before f7da72b (3.8 x the solo TTFT).

    python scripts/slo_test_margins.py [REPEATS]        # beside a busy loop: taskset -c 1 sh -c 'while :; do :; done' &
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conftest import handle, llama_server_process
from tuner.base.level import levels_in
from tuner.engines import llamacpp_provision
from tuner.probes import LoadProbe
from tuner.space import LoadProbeSpec


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    load = LoadProbeSpec(concurrency=[1, 2, 3], prompt_tokens=32, output_tokens=64, duration=3, max_duration=4, warmup=1)
    with (
        tempfile.TemporaryDirectory() as d,
        llama_server_process(Path(d), llamacpp_provision.model_file(), {"ctx-size": 2048, "parallel": 2}) as server,
    ):
        server.wait_ready()
        for _ in range(repeats):
            levels = levels_in(LoadProbe(load).run(handle(server)).details)
            solo, two, three = levels["1"], levels["2"], levels["3"]
            ttft, e2e = solo.ttft_p50 or 0.0, solo.e2e_p50 or 0.0
            print(
                f"2 clients' TTFT p99 {two.ttft_p99:.3f} s, 3 clients' {three.ttft_p99:.3f} s; "
                f"target {ttft + 0.5 * e2e:.2f} s (solo TTFT {ttft:.3f} + half E2E {e2e:.3f}), before f7da72b {3.8 * ttft:.2f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
