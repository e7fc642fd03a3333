"""Benchmark: is the pre-screen ever wrong against a measured table? Prints counts from one run.

For every config of the table, the screen is fitted to every OTHER measured config (the most
evidence any study of that grid could hold) and asked about this one: a skip of a config that
started is a false skip, a skip of one that failed a true skip. Then, over seeds, the configs in
a random order, each predicted from the ones before it (what a study sees as it goes).

    python benchmarks/screen_audit.py [docs/data/search-tables/h200-vllm-grid.json] [--seeds 20]
    python benchmarks/screen_audit.py TABLE --screen-file OLD_screen.py   # an earlier tuner/results/screen.py, for before/after
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from pathlib import Path
from typing import Any

from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TABLE = ROOT / "docs" / "data" / "search-tables" / "h200-vllm-grid.json"


def trial_of(grid: dict[str, list], row: dict[str, Any], params: dict[str, Any], number: int) -> FrozenTrial:
    dists = {k: CategoricalDistribution(v) for k, v in grid.items()}
    if row["ok"]:
        t = create_trial(
            params=params,
            distributions=dists,
            values=[row["tok_s"]],
            user_attrs={"capacity": {"kv_tokens": row.get("kv_tokens")}},
        )
    else:
        t = create_trial(
            params=params,
            distributions=dists,
            state=TrialState.PRUNED,
            user_attrs={"signature": row["signature"], "evidence": {"details": row.get("details") or {}}},
        )
    t.number = number
    return t


def audit(table: dict[str, Any], screen_for, engine: str, seeds: int, as_record=lambda t: t) -> dict[str, int]:
    """``as_record``: what the screen under audit fits on (today's: tuner.trials.TrialRecord; an
    older commit's screen.py: Optuna's FrozenTrial)."""
    grid, rows = table["grid"], table["rows"]
    items = [(json.loads(k), r) for k, r in rows.items()]
    trials = [as_record(trial_of(grid, r, p, i)) for i, (p, r) in enumerate(items)]
    counts = {
        "configs": len(items),
        "started": sum(r["ok"] for _, r in items),
        "loo_false_skips": 0,
        "loo_true_skips": 0,
        "seq_false_skips": 0,
        "seq_true_skips": 0,
        "seq_predictions": 0,
    }
    for i, (params, row) in enumerate(items):
        screen = screen_for(engine)
        screen.fit([t for j, t in enumerate(trials) if j != i])
        if screen.predict(dict(params)) is not None:
            counts["loo_false_skips" if row["ok"] else "loo_true_skips"] += 1
    for seed in range(seeds):
        order = list(range(len(items)))
        random.Random(seed).shuffle(order)
        for n, i in enumerate(order):
            screen = screen_for(engine)
            screen.fit([trials[j] for j in order[:n]])
            counts["seq_predictions"] += 1
            if screen.predict(dict(items[i][0])) is not None:
                counts["seq_false_skips" if items[i][1]["ok"] else "seq_true_skips"] += 1
    return counts


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("table", type=Path, nargs="?", default=TABLE)
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--screen-file", type=Path, help="a tuner/results/screen.py of another commit (its screen_for is used)")
    args = ap.parse_args(argv)
    if args.screen_file:
        spec = importlib.util.spec_from_file_location("screen_under_audit", args.screen_file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
        screen_for, as_record = module.screen_for, lambda t: t
    else:
        from tuner.results.screen import screen_for
        from tuner.trials import TrialRecord

        as_record = TrialRecord.of
    table = json.loads(args.table.read_text())
    c = audit(table, screen_for, args.engine, args.seeds, as_record)
    print(f"{args.table.name} ({args.screen_file or 'tuner/results/screen.py'}): {c['configs']} configs, {c['started']} started")
    print(f"  leave-one-out: {c['loo_false_skips']} false skips (configs that started), {c['loo_true_skips']} true skips")
    print(
        f"  {args.seeds} random orders, {c['seq_predictions']} predictions: {c['seq_false_skips']} false skips, "
        f"{c['seq_true_skips']} true skips"
    )


if __name__ == "__main__":
    main()
