"""Benchmark: how repeatable the load probe's throughput is, measured in one run.

    fresh      one config on N fresh servers (each started, probed at the target concurrency,
               stopped): (max-min)/mean of output tok/s, and calibration: how many of the N
               runs' reported 95 % CIs cover the mean of all N.
    windows    M windows on one running server: (max-min)/mean.
    neighbour  (2+ devices) the same config on partition 0 alone vs while partition 1 serves
               the same config under load, interleaved A B A B ...: difference of the means.

    python benchmarks/noise.py --space cpu-llamacpp --fresh 5 --windows 5
    python benchmarks/noise.py --space h200-vllm --params '{"max-model-len": 4096}' --fresh 5 --neighbour 2

Params default to the space's first enqueued config (else each parameter's first choice/low);
``--params`` overrides some of them. ``--json FILE`` keeps every number (the committed data).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuner import space as spaces
from tuner.app import prepare
from tuner.base.level import levels_in
from tuner.host.partitions import make_partitions
from tuner.probes import LoadProbe
from tuner.serving.server import end_servers_on_sigterm
from tuner.serving.trial import pinned, run_trial, serve


def default_params(space: spaces.SearchSpace) -> dict[str, Any]:
    if space.enqueue:
        return dict(space.enqueue[0])
    return {name: getattr(p, "choices", [None])[0] if p.type == "categorical" else p.low for name, p in space.parameters.items()}


def target_only(space: spaces.SearchSpace, **load: Any) -> spaces.SearchSpace:
    """The space with the load probe at its target concurrency only, and no other probe."""
    spec = space.probes.load
    assert spec is not None, "the space has no load probe"
    spec = spec.model_copy(update={"concurrency": [spec.target_concurrency], "target": spec.target_concurrency, **load})
    return space.model_copy(update={"probes": spaces.ProbesSpec(load=spec, recall=None, served=None, overload=None, slo=None)})


def spread(values: list[float]) -> float:
    """(max - min) / mean; nan from one value or a zero mean (nothing streamed)."""
    mean = statistics.fmean(values) if values else 0.0
    return (max(values) - min(values)) / mean if len(values) > 1 and mean else float("nan")


def level(result: Any) -> dict[str, Any]:
    m = result.metrics
    target = next(iter(levels_in(result.details).values()))  # the target level: the only one run here
    return {
        "tok_s": m["output_tok_s"],
        "ci": m.get("output_tok_s_ci", float("nan")),
        "window_s": m.get("window_s", 0.0),
        "cache_hit_rate": target.cache_hit_rate,
        "prompt_tokens_exact": target.prompt_tokens_exact,
    }


def fresh(space: spaces.SearchSpace, params: dict, n: int, tmp: Path, runs: list[dict[str, float]]) -> list[dict[str, float]]:
    partition = make_partitions(space.hardware.kind, space.hardware.devices, _size(space, params))[0]
    for i in range(n):
        outcome = run_trial(space, params, tmp / f"fresh-{i}", partition)
        row = level(outcome.probes[0])
        row["startup_s"] = outcome.timings.startup_s
        runs.append(row)
        _SAVE()
        print(
            f"fresh server {i + 1}/{n}: {row['tok_s']:,.1f} tok/s +- {row['ci']:,.1f} (window {row['window_s']:.0f}s, start "
            f"{row['startup_s']:.0f}s)",
            flush=True,
        )
    return runs


def windows_and_neighbour(
    space: spaces.SearchSpace, params: dict, windows: int, neighbour: int, tmp: Path, result: dict
) -> dict[str, Any]:
    """M windows on one server; then, with a second partition, alone (A) vs beside a busy neighbour (B)."""
    size = _size(space, params)
    parts = make_partitions(space.hardware.kind, space.hardware.devices, size)
    probe = LoadProbe(space.probes.load)
    result.update({"windows": [], "alone": [], "beside_busy": []})
    with serve(space, params, tmp / "windows", parts[0]) as main:
        for i in range(windows):
            with pinned(parts[0].client_cpus):
                row = level(probe.run(main.handle))
            result["windows"].append(row)
            _SAVE()
            print(f"window {i + 1}/{windows} on one server: {row['tok_s']:,.1f} tok/s +- {row['ci']:,.1f}", flush=True)
        if neighbour and len(parts) > 1:
            print(f"partitions: {parts[0].describe()} | {parts[1].describe()}", flush=True)
            with serve(space, params, tmp / "neighbour", parts[1]) as other:
                for i in range(neighbour):
                    for label in ("alone", "beside_busy"):
                        row = _measure_beside(probe, main, other, parts, busy=label == "beside_busy")
                        result[label].append(row)
                        _SAVE()
                        print(f"round {i + 1}/{neighbour} {label}: {row['tok_s']:,.1f} tok/s +- {row['ci']:,.1f}", flush=True)
    return result


def _measure_beside(probe: LoadProbe, main: Any, other: Any, parts: list, *, busy: bool) -> dict[str, float]:
    if not busy:
        with pinned(parts[0].client_cpus):
            return level(probe.run(main.handle))
    spec = probe.spec
    # The neighbour's level outlasts ours: its warmup, then at least our longest window. Its load
    # client is a process of its own, as in `tune run` (one Ray worker per partition): a thread
    # here would share this interpreter's GIL with the client being measured.
    busy_spec = spec.model_copy(update={"duration": spec.max_duration + 30, "max_duration": spec.max_duration + 30})
    neighbour = multiprocessing.get_context("spawn").Process(
        target=_busy, args=(busy_spec, other.handle, parts[1].client_cpus), daemon=True
    )
    neighbour.start()
    time.sleep(min(20.0, spec.duration))  # the neighbour's ramp is behind us
    with pinned(parts[0].client_cpus):
        row = level(probe.run(main.handle))
    neighbour.join()
    return row


def _busy(spec: Any, handle: Any, cpus: tuple[int, ...]) -> None:
    with pinned(cpus):
        LoadProbe(spec).run(handle)


def _size(space: spaces.SearchSpace, params: dict) -> int:
    per = space.hardware.per_trial
    return int(params[per]) if isinstance(per, str) else per


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="cpu-llamacpp")
    ap.add_argument("--params", default="{}", help="JSON object overriding the default params")
    ap.add_argument("--fresh", type=int, default=5)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--neighbour", type=int, default=0, help="rounds of alone / beside a busy neighbour")
    ap.add_argument("--duration", type=float, help="override the level's shortest window (s)")
    ap.add_argument("--max-duration", type=float, help="override the level's longest window (s)")
    ap.add_argument("--devices", help="override the space's devices, e.g. 0,1 (a second partition for --neighbour)")
    ap.add_argument("--json", type=Path, help="write every number here (rewritten after each run)")
    args = ap.parse_args(argv)
    base, _ = prepare.load(args.space)
    overrides = {k: v for k, v in (("duration", args.duration), ("max_duration", args.max_duration)) if v is not None}
    if args.devices:
        hw = base.hardware.model_copy(update={"devices": [int(d) for d in args.devices.split(",")]})
        base = base.model_copy(update={"hardware": hw})
    space = target_only(base, **overrides)
    params = {**default_params(base), **json.loads(args.params)}
    spec = space.probes.load
    print(
        f"{args.space}: {params}; C={spec.target_concurrency}, {spec.prompt_tokens} in / {spec.output_tokens} out, "
        f"window {spec.duration:g}-{spec.max_duration:g}s, CI target {spec.ci_target:.0%}",
        flush=True,
    )
    report: dict[str, Any] = {"space": args.space, "params": params, "spec": spec.model_dump()}
    global _SAVE
    _SAVE = (lambda: args.json.write_text(json.dumps(report, indent=2) + "\n")) if args.json else (lambda: None)
    with tempfile.TemporaryDirectory() as tmp:
        if args.fresh:
            report["fresh"] = []
            fresh(space, params, args.fresh, Path(tmp), report["fresh"])
        if args.windows or args.neighbour:
            windows_and_neighbour(space, params, args.windows, args.neighbour, Path(tmp), report)
    summarize(report)
    _SAVE()
    return report


def _nothing() -> None:
    return None


_SAVE = _nothing  # rewrites the JSON after each run, so a cut-off run keeps its numbers (set by main)


def calibration(runs: list[dict[str, Any]]) -> list[bool]:
    """Leave one out: does run i's reported half-width (tuner.results.noise.half_width for one run: its
    probe CI combined with the floor the other runs give) cover the other runs' mean?"""
    from tuner.results.noise import half_width, noise_floor

    hits = []
    for i, run in enumerate(runs):
        others = [[r["tok_s"]] for j, r in enumerate(runs) if j != i]
        floor = noise_floor([others], [True])
        ci = run["ci"] if run["ci"] == run["ci"] else 0.0  # nan: the probe reported none
        (hw,) = half_width([run["tok_s"]], [[run["tok_s"]]], floor, [True], within={0: ci})
        hits.append(abs(run["tok_s"] - statistics.fmean(o[0] for o in others)) <= hw)
    return hits


def summarize(report: dict[str, Any]) -> None:
    if runs := report.get("fresh"):
        values = [r["tok_s"] for r in runs]
        mean = statistics.fmean(values)
        covered = sum(1 for r in runs if abs(r["tok_s"] - mean) <= r["ci"])
        report["fresh_spread"] = spread(values)
        report["fresh_coverage"] = covered / len(runs)
        print(
            f"fresh servers: n={len(values)}, mean {mean:,.1f} tok/s, (max-min)/mean {spread(values):.1%}; "
            f"the probe's own 95 % CIs covering the mean of all: {covered}/{len(runs)}"
        )
        if len(runs) >= 3:
            hits = calibration(runs)
            report["reported_interval_coverage"] = sum(hits) / len(hits)
            print(
                f"the interval tuner reports for a one-run config (probe CI combined with the noise floor of the "
                f"other {len(runs) - 1} fresh servers) covers their mean: {sum(hits)}/{len(hits)}"
            )
    if rows := report.get("windows"):
        values = [r["tok_s"] for r in rows]
        report["windows_spread"] = spread(values)
        print(
            f"windows on one server: n={len(values)}, mean {statistics.fmean(values):,.1f} tok/s, (max-min)/mean "
            f"{spread(values):.1%}"
        )
    if report.get("alone") and report.get("beside_busy"):
        a = statistics.fmean(r["tok_s"] for r in report["alone"])
        b = statistics.fmean(r["tok_s"] for r in report["beside_busy"])
        report["neighbour_change"] = b / a - 1
        print(
            f"alone {a:,.1f} vs beside a busy neighbour {b:,.1f} tok/s: {b / a - 1:+.1%} (n={len(report['alone'])} each, "
            "interleaved)"
        )


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    main()
