"""The SLO probe's answer checked by another tool: the tune's pick on a fresh server, under
`vllm bench serve` at the found concurrency N (``--max-concurrency N``) and at 1.25 N, with the
same prompt and output lengths. At N the bench must meet the SLO the tune held it to, at 1.25 N
miss it; the tune's goodput must be within 5 % of the bench's output throughput at N.

A study whose SLO probe ran open loop (``probes.slo.mode: rate``) is checked the same way at its
request rate R and 1.25 R (``--request-rate``: Poisson arrivals, no client limit), each run
``--seconds`` long.

Prints one line per level and the ratio goodput / bench throughput at N; writes the bench's raw
results and a summary JSON under --out.

    python benchmarks/goodput_crosscheck.py --study h200-vllm-goodput --out $OUT [--prompts-per-client 20]
    python benchmarks/goodput_crosscheck.py --study h200-vllm-goodput-rate --out $OUT [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner import engines
from tuner.artifacts import RunDir
from tuner.cli._common import open_existing, stored_space
from tuner.export import build_export
from tuner.partitions import free_port
from tuner.pick import pick
from tuner.server import ServerProcess, end_servers_on_sigterm


def bench(url: str, model: str, level: list[str], prompts: int, prompt_tokens: int, output_tokens: int, out: Path) -> dict:
    """One `vllm bench serve` run at ``level`` (``--max-concurrency N`` or ``--request-rate R``); its saved result."""
    tag = f"c{level[1]}" if level[0] == "--max-concurrency" else f"r{level[1]}"
    name = f"bench-{tag}.json"
    argv = [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
        "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", model,
        "--dataset-name", "random", "--random-input-len", str(prompt_tokens), "--random-output-len", str(output_tokens),
        "--ignore-eos", "--num-prompts", str(prompts), *level,
        "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "99",
        "--save-result", "--result-dir", str(out), "--result-filename", name, "--seed", str(len(name) + prompts),
    ]  # fmt: skip
    with (out / f"bench-{tag}.log").open("w") as log:
        subprocess.run(argv, check=True, stdout=log, stderr=subprocess.STDOUT)
    return json.loads((out / name).read_text())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", required=True)
    ap.add_argument("--storage")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts-per-client", type=int, default=20, help="requests per client: ramp and drain under 5 %")
    ap.add_argument("--seconds", type=float, default=60.0, help="open loop: each run's length (prompts = rate x seconds)")
    args = ap.parse_args(argv)
    end_servers_on_sigterm()
    args.out.mkdir(parents=True, exist_ok=True)
    study = open_existing(args.study, args.storage)
    space = stored_space(study)
    chosen = pick(study, "knee")
    m = chosen.trial.metrics
    slo, load = space.probes.slo, space.probes.load
    assert slo is not None and slo.targets is not None and load is not None, (slo, load)
    targets, rate = slo.targets, slo.mode == "rate"
    answer = m["slo.rate"] if rate else int(m["slo.concurrency"])
    unit = "requests/s" if rate else "clients"
    assert answer > 0, m
    levels = [answer, round(1.25 * answer, 2)] if rate else [answer, math.ceil(1.25 * answer)]
    port = free_port("127.0.0.1", 33000, 500)
    exported = build_export(study, space, chosen, port=port, run_dir=RunDir.for_study(args.study).root)
    adapter = engines.get(space.engine)
    model = adapter.served_model_name(adapter.resolve_model(space.model.path))
    rows = []
    with ServerProcess(
        exported.command, adapter=adapter, log_path=args.out / "server.log", host="127.0.0.1", port=port, model=model,
        startup_timeout=space.server.startup_timeout,
    ) as server:  # fmt: skip
        server.wait_ready()
        for level in levels:
            if rate:
                flag, prompts = "--request-rate", round(level * args.seconds)
            else:
                flag, prompts = "--max-concurrency", args.prompts_per_client * int(level)
            r = bench(server.url, model, [flag, str(level)], prompts, load.prompt_tokens, load.output_tokens, args.out)
            figures = {name: r[f"p99_{name.split('_')[0]}_ms"] / 1000 for name in ("ttft_p99", "itl_p99", "tpot_p99")}
            failed = r.get("failed", 0) or 0
            figures["error_rate"] = failed / max(1, r.get("completed", 0) + failed)
            broke = targets.violated(figures)
            key = "rate" if rate else "concurrency"
            rows.append({key: level, "output_tok_s": r["output_throughput"], **figures, "broke": broke})
            print(
                f"bench at {level} {unit}: {r['output_throughput']:,.1f} output tok/s, TTFT p99 {figures['ttft_p99']:.3f} s, "
                f"ITL p99 {figures['itl_p99'] * 1000:.1f} ms, {failed} failed: "
                + ("meets the SLO" if not broke else "misses the SLO (" + "; ".join(broke) + ")")
            )
    at_n = rows[0]["output_tok_s"]
    ratio = m["slo.goodput"] / at_n
    summary = {
        "study": args.study, "trial": chosen.number, "params": dict(chosen.trial.params), "slo": targets.model_dump(),
        "tune": {k: v for k, v in m.items() if k.startswith("slo.")},
        "mode": slo.mode, "bench": rows, "goodput_over_bench_at_n": ratio,
    }  # fmt: skip
    (args.out / "crosscheck.json").write_text(json.dumps(summary, indent=2) + "\n")
    goodput, ci = m["slo.goodput"], m.get("slo.goodput_ci", 0.0)
    print(f"tune: trial {chosen.number} holds the SLO at {answer} {unit}, goodput {goodput:,.1f} +- {ci:,.1f}")
    print(f"ratio goodput / bench output throughput at {answer}: {ratio:.3f} (within 5 %: {abs(ratio - 1) <= 0.05})")
    print(f"bench meets the SLO at the answer: {not rows[0]['broke']}; misses it at 1.25 x: {bool(rows[1]['broke'])}")


if __name__ == "__main__":
    main()
