"""Measurement: does a quantized KV cache cost recall on this engine and model?

One config of a space, served once per KV cache dtype (the space's own KV parameter), climbs the
recall ladder (lengths derived from the configured context, several depths, repeats) with a
plain haystack and with distractor pass keys; the configs run side by side, one per partition
of the space's devices. Prints a table of recall per rung and writes it as JSON.

    python benchmarks/kv_precision.py SPACE PARAM DTYPE[,DTYPE...] [--set k=v ...] [--repeats 3]
        [--distractors 0,8] [--out kv.json]
    e.g. python benchmarks/kv_precision.py search_spaces/cpu-llamacpp.yaml cache-type-k f16,q4_0 \
        --set ctx-size=4096 --set parallel=1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuner.app.prepare import load
from tuner.host.partitions import make_partitions
from tuner.probes import RecallProbe, ServedContextProbe
from tuner.serving.server import end_servers_on_sigterm
from tuner.serving.trial import serve
from tuner.space import RecallProbeSpec
from tuner.space.schema import ServedContextProbeSpec


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


def measure(space, params: dict, partition, out: Path, specs: dict[int, RecallProbeSpec], served_at: int = 0) -> dict:
    began = time.monotonic()
    row: dict = {"params": params}
    try:
        with serve(space, params, out, partition) as served:
            row["startup_s"] = round(served.startup_s, 1)
            row["context_limit"] = served.handle.capacity.context_per_request
            if served_at:  # the configured context, served side by side (probes.served)
                check = ServedContextProbe(ServedContextProbeSpec(), default_concurrency=served_at).run(served.handle)
                row["served"] = {**check.metrics, **{k: v for k, v in check.details.items() if k != "prompt_tokens_seen"}}
            for distractors, spec in specs.items():
                result = RecallProbe(spec).run(served.handle)
                row[f"distractors={distractors}"] = {
                    "effective_context": result.metrics["effective_context"],
                    "passed": result.metrics["passed"],
                    "cases": result.metrics["cases"],
                    "recall": result.details["recall"],
                    "stop_reason": result.details["stop_reason"],
                    "misses": [
                        {"length": n, "case": k, "expected": c["expected"], "answer": c["answer"]}
                        for n, cases in result.details["table"].items()
                        for k, c in cases.items()
                        if not c["passed"]
                    ],
                }
    except Exception as exc:  # noqa: BLE001 - a dtype the engine refuses is a result too
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    row["seconds"] = round(time.monotonic() - began, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("space")
    ap.add_argument(
        "param", help="the space's KV cache dtype parameter, e.g. kv-cache-dtype (a+b: both, e.g. cache-type-k+cache-type-v)"
    )
    ap.add_argument("dtypes")
    ap.add_argument("--set", action="append", default=[], help="k=v for the other parameters")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--depths", default="0.1,0.5,0.9")
    ap.add_argument("--distractors", default="0,8")
    ap.add_argument("--start", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=Path("runs/kv-precision.json"))
    ap.add_argument("--served", type=int, default=0, help="also serve the full context at this concurrency (probes.served)")
    args = ap.parse_args()
    space, _ = load(args.space)
    fixed = dict(kv.split("=", 1) for kv in args.set)
    base = {**{k: _value(v) for k, v in fixed.items()}}
    specs = {
        int(d): RecallProbeSpec(
            start=args.start,
            depths=[float(x) for x in args.depths.split(",")],
            repeats=args.repeats,
            distractors=int(d),
            threshold=1.0,
            seed=11,
        )
        for d in args.distractors.split(",")
    }
    dtypes = args.dtypes.split(",")
    parts = make_partitions(
        space.hardware.kind, space.hardware.devices, 1 if space.hardware.kind == "gpu" else len(space.hardware.devices)
    )
    work = args.out.parent / (args.out.stem + "-servers")
    rows: dict[str, dict] = {}
    with ThreadPoolExecutor(len(parts)) as pool:
        for i in range(0, len(dtypes), len(parts)):
            batch = dtypes[i : i + len(parts)]
            futures = {
                d: pool.submit(
                    measure, space, {**base, **dict.fromkeys(args.param.split("+"), d)}, p, work / d, specs, args.served
                )
                for d, p in zip(batch, parts, strict=False)
            }
            rows.update({d: f.result() for d, f in futures.items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"space": args.space, "param": args.param, "fixed": base, "rows": rows}, indent=2))
    for d, row in rows.items():
        if "error" in row:
            print(f"{args.param}={d}: {row['error']}")
            continue
        if "served" in row:
            s = row["served"]
            print(
                f"{args.param}={d:>10} served {s['requests']:.0f} x {s['context_limit']:,} tokens: ok {s['ok']:.0f}, "
                f"{s['errors']:.0f} errors, prompt {s['prompt_tokens']:.0f} tokens, {s['seconds']:.1f}s, first error "
                f"{s['first_error']}"
            )
        for key in (k for k in row if k.startswith("distractors=")):
            r = row[key]
            cells = "  ".join(f"{n}: {v:.2f}" for n, v in r["recall"].items())
            print(
                f"{args.param}={d:>10} {key:<14} effective {r['effective_context']:>7,.0f}  {r['passed']:.0f}/{r['cases']:.0f}  "
                f"[{cells}]"
            )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    end_servers_on_sigterm()
    main()
