"""Issue 46's knob-effect table from a study whose first trials are a base config and each knob
flipped alone (search_spaces/h200-sglang-agent-knobs.yaml): per closed-loop level, output tok/s
(+- its 95 % CI over the window's batches), the prefix-cache hit rate, TTFT p99 and ITL p99.

    python scripts/knob_table.py docs/data/workloads/h100-knobs-2026-12-05/study.db h200-sglang-agent-knobs
"""

from __future__ import annotations

import sys

from optuna.trial import TrialState

from tuner.app.read import open_existing
from tuner.trials import read_trials


def main(db: str, name: str) -> None:
    done = read_trials(open_existing(name, f"sqlite:///{db}"), states=(TrialState.COMPLETE,))
    base, base_m = done[0].params, done[0].metrics
    levels = sorted({int(k.split("@")[1]) for k in base_m if k.startswith("load.output_tok_s@")})
    print(
        "| trial | knob flipped (base: " + ", ".join(f"{k} {v}" for k, v in base.items()) + ") | clients "
        "| output tok/s (95 % CI) | vs base | cache hit | TTFT p99 (s) | ITL p99 (ms) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for t in done:
        m = t.metrics
        flipped = ", ".join(f"{k} {v}" for k, v in t.params.items() if v != base[k]) or "none (base)"
        for c in levels:
            tok, ci = m[f"load.output_tok_s@{c}"], m.get(f"load.output_tok_s_ci@{c}") or 0.0
            ratio = tok / base_m[f"load.output_tok_s@{c}"]
            hit = m.get(f"load.cache_hit_rate@{c}")
            print(
                f"| {t.number} | {flipped} | {c} | {tok:,.0f} +- {ci:,.0f} | {ratio:.2f} | "
                f"{'-' if hit is None else f'{100 * hit:.1f} %'} | {m[f'load.ttft_p99@{c}']:.2f} | "
                f"{1000 * m[f'load.itl_p99@{c}']:.0f} |"
            )


if __name__ == "__main__":
    main(*sys.argv[1:3])
