"""Does the embedded default's longest load window buy a better decision? Its baseline config as a
whole trial (every probe of the space) on fresh servers, the window cap A and B interleaved
(A B, B A, A B, ...): the spread of the objective between fresh servers under each cap, the
probe's own CI, and how long a trial takes.

    python scripts/window_cap.py --rounds 4 --caps 15,8 --json docs/data/suite/window-cap.json

Run it on an otherwise idle machine: it measures noise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuner import space as spaces
from tuner.app import prepare
from tuner.partitions import make_partitions
from tuner.server import end_servers_on_sigterm
from tuner.trial import run_trial


def with_cap(space: spaces.SearchSpace, cap: float) -> spaces.SearchSpace:
    load = space.probes.load
    assert load is not None
    probes = space.probes.model_copy(update={"load": load.model_copy(update={"max_duration": cap})})
    return space.model_copy(update={"probes": probes})


def one(space: spaces.SearchSpace, params: dict[str, Any], folder: Path) -> dict[str, Any]:
    per = space.hardware.per_trial
    size = int(params[per]) if isinstance(per, str) else per  # a parameter's value (tp, threads) or a number
    partition = make_partitions(space.hardware.kind, space.hardware.devices, size)[0]
    before = os.times()
    outcome = run_trial(space, params, folder, partition)
    after = os.times()
    metrics: dict[str, float] = {}
    for probe in outcome.probes:
        metrics.update({f"{probe.probe}.{k}": v for k, v in probe.metrics.items() if isinstance(v, (int, float))})
    return {
        "goodput": metrics.get("slo.goodput"),
        "goodput_ci": metrics.get("slo.goodput_ci"),
        "output_tok_s": metrics.get("load.output_tok_s"),
        "output_tok_s_ci_rel": metrics.get("load.output_tok_s_ci_rel"),
        "window_s": metrics.get("load.window_s"),
        "effective_context": metrics.get("recall.effective_context"),
        "probe_s": outcome.timings.probe_s,
        # the server's CPU: run_trial starts it as this process's child and reaps it
        "children_cpu_s": after.children_user + after.children_system - before.children_user - before.children_system,
    }


def interleaved(
    variants: dict[str, spaces.SearchSpace],
    params: dict[str, Any],
    rounds: int,
    name: Callable[[str], str],
    save: Callable[[dict[str, list[dict[str, Any]]]], None],
) -> dict[str, list[dict[str, Any]]]:
    """``params`` as a whole trial on a fresh server per run, the variants in turn, their order
    reversed every other round (A B, B A, ...); ``save`` gets the runs so far after each run."""
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for key in variants if r % 2 == 0 else reversed(variants):
                row = one(variants[key], params, Path(tmp) / f"{r}-{key}")
                runs[key].append(row)
                print(
                    f"round {r + 1} {name(key)}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items() if v is not None),
                    flush=True,
                )
                save(runs)
    return runs


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="cpu-llamacpp")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--caps", default="15,8", help="two longest-window lengths (s) to compare")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    end_servers_on_sigterm()  # `timeout` or a kill must not leave a server behind
    base, _ = prepare.load(args.space)
    params = dict(base.enqueue[0])
    variants = {f"{float(c):g}": with_cap(base, float(c)) for c in args.caps.split(",")}

    def save(runs: dict[str, list[dict[str, Any]]]) -> None:
        if args.json:
            args.json.write_text(json.dumps({"space": args.space, "params": params, "runs": runs}, indent=2) + "\n")

    runs = interleaved(variants, params, args.rounds, lambda key: f"cap {key}s", save)
    summarize(runs)
    return runs


def summarize(runs: dict[str, list[dict[str, Any]]]) -> None:
    for cap, rows in runs.items():
        g = [row["goodput"] for row in rows]
        mean = statistics.fmean(g)
        sd = statistics.stdev(g) if len(g) > 1 else float("nan")
        cis = [row["output_tok_s_ci_rel"] for row in rows if row["output_tok_s_ci_rel"] is not None]  # none: no spread
        probe = statistics.fmean(row["probe_s"] for row in rows)
        print(
            f"cap {cap}s: slo.goodput {mean:.1f} +- {sd:.1f} (SD, n={len(g)}, {sd / mean:.1%} relative), load CI half-width "
            f"{', '.join(f'{c:.1%}' for c in cis) or 'none'} of the mean ({len(cis)} of {len(rows)} runs gave one), "
            f"probes {probe:.0f} s a trial"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":  # the summary of a JSON it wrote
        summarize(json.loads(Path(sys.argv[2]).read_text())["runs"])
    else:
        main()
