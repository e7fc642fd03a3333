"""The real GPU table for benchmarks/search_efficiency.py, from the grid study that
scripts/h200-grid.sh runs on the H200 (benchmarks/spaces/h200-vllm-grid.yaml, every config
launched once, screen off): one row per launched config, failures with the engine's own numbers.

    python benchmarks/gpu_table.py RUNS_DIR/h200-vllm-grid/study.db [--out docs/data/search-tables/h200-vllm-grid.json]

The table records which configs of the grid are still unmeasured: the benchmark replays only a
complete table (a search over a partial one would look up configs nobody measured).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tuner.trials import read_trials

SPACE = ROOT / "benchmarks" / "spaces" / "h200-vllm-grid.yaml"
OUT = ROOT / "docs" / "data" / "search-tables" / "h200-vllm-grid.json"


def grid_of(path: Path = SPACE) -> dict[str, list]:
    import yaml

    raw = yaml.safe_load(path.read_text())
    return {name: p["choices"] for name, p in raw["parameters"].items()}


def key(grid: dict[str, list], params: dict) -> str:
    return json.dumps({k: params[k] for k in grid}, sort_keys=True)


def rows_of(db: Path, grid: dict[str, list]) -> dict[str, dict]:
    study = optuna.load_study(study_name="h200-vllm-grid", storage=f"sqlite:///{db}")
    rows = {}
    for t in read_trials(study, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        m = t.metrics
        if t.state == TrialState.COMPLETE:
            row = {
                "ok": True,
                "tok_s": m["load.output_tok_s"],
                "tok_s_ci": m.get("load.output_tok_s_ci"),
                "context": m["capacity.context_per_request"],
                "kv_tokens": m.get("capacity.kv_tokens"),
                "ttft_p99": m.get("load.ttft_p99"),
                "startup_s": t.timings.get("startup_s"),
            }
        else:
            details = {k: v for k, v in t.details.items() if k != "fatal_seen_at"}
            row = {"ok": False, "signature": t.signature, "details": details, "elapsed_s": (t.evidence or {}).get("elapsed_s")}
        rows[key(grid, t.params)] = {"trial": t.number, **row}
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db", type=Path)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    grid = grid_of()
    rows = rows_of(args.db, grid)
    import itertools

    every = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    missing = [key(grid, p) for p in every if key(grid, p) not in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "grid": grid,
                "rows": rows,
                "unmeasured": missing,
                "measured": time.strftime("%Y-%m-%d %H:%M"),
                "how": "vLLM 0.26, one H200, SmolLM2-135M-Instruct real weights, CUDA graphs and torch.compile on; "
                "C=128, 512 in / 128 out, one 8-16 s window per config (scripts/h200-grid.sh)",
            },
            indent=1,
        )
    )
    print(
        f"{len(rows)} of {len(every)} configs measured ({sum(1 for r in rows.values() if not r['ok'])} failed to start); "
        f"{len(missing)} unmeasured -> {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}"
    )


if __name__ == "__main__":
    main()
