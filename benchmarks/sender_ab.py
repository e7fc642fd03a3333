"""Benchmark: does the open loop measure the server, or its own senders? One server of a study's
pick (from its stored space, on the partition's server cores, as a trial runs it), the tool's own
open loop (LoadProbe.rate_level, pinned to the partition's client cores) at one request rate,
sent by senders planned for 1 client core (what tuner.probes._senders planned at this rate before
its per-token cost was measured with spaced tokens) and for every client core (what it plans now),
interleaved (A B, then B A, ...), each level on a drained server.

A sender that cannot keep up releases requests late (send lag) and stamps tokens late: its ITL
p99 and TTFT p99 then measure the client. Where both plans deliver the schedule and agree on
TTFT and ITL, the client is not in the figures; where one sender's p99s exceed the other's by
more than their spread across repeats, it was.

    python benchmarks/sender_ab.py --study h200-sglang-goodput-rate --out $OUT [--rate 38.88] [--seconds 45] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from goodput_crosscheck import first_partition

from tuner.app.read import open_existing, stored_space
from tuner.probes import LoadProbe, Senders, ServerHandle
from tuner.results.pick import pick
from tuner.serving.server import end_servers_on_sigterm
from tuner.serving.trial import pinned, serve
from tuner.space import LoadProbeSpec

KEPT = (
    "senders", "client_cores", "offered_rate", "achieved_rate", "achieved_over_offered", "send_lag_p99",
    "completion_rate", "ttft_p99", "itl_p99", "tpot_p99", "output_tok_s", "growth", "growth_ci", "in_system_mean",
)  # fmt: skip


async def levels(
    handle: ServerHandle, load: LoadProbeSpec, rate: float, plans: list[int], seconds: float, repeats: int
) -> list[dict[str, Any]]:
    """``repeats`` rounds of one level per plan (client cores to plan senders for), the order
    reversed every other round, each on a drained server."""
    spec = load.model_copy(update={"duration": seconds, "max_duration": seconds, "ci_target": 1e-9})
    probe = LoadProbe(spec)
    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(spec.request_timeout, connect=10.0), trust_env=False) as client:
        prompts = await probe.prompts(client, handle)
        with Senders() as senders:
            for r in range(repeats):
                for cores in plans if r % 2 == 0 else plans[::-1]:
                    settled = await probe.settle(client, handle)
                    summary = await probe.rate_level(senders, handle, prompts, rate, seed=100 + len(rows), cores=cores)
                    row = {"round": r, "planned_for_cores": cores, **{k: summary.get(k) for k in KEPT}, **settled}
                    rows.append(row)
                    print(
                        f"round {r} cores {cores} ({row['senders']} sender(s)): achieved/offered "
                        f"{row['achieved_over_offered']:.3f}, send lag p99 {row['send_lag_p99'] * 1000:.0f} ms, "
                        f"TTFT p99 {row['ttft_p99']:.3f} s, ITL p99 {row['itl_p99'] * 1000:.1f} ms, "
                        f"completed {row['completion_rate']:.1f}/s, {row['output_tok_s']:,.0f} tok/s",
                        flush=True,
                    )
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """Per plan: the mean and spread (min-max over repeats) of each p99."""
    lines = []
    for cores in sorted({r["planned_for_cores"] for r in rows}):
        mine = [r for r in rows if r["planned_for_cores"] == cores]
        parts = []
        for key, unit, scale in (("send_lag_p99", "ms", 1000), ("ttft_p99", "s", 1), ("itl_p99", "ms", 1000)):
            values = [r[key] * scale for r in mine if r.get(key) is not None]
            if values:
                parts.append(f"{key} {statistics.fmean(values):.3g} {unit} ({min(values):.3g}-{max(values):.3g})")
        lines.append(f"planned for {cores} core(s), {mine[0]['senders']} sender(s), {len(mine)} levels: " + ", ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", required=True)
    ap.add_argument("--storage")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rate", type=float, help="requests/s (default: the pick's SLO answer)")
    ap.add_argument("--seconds", type=float, default=45.0, help="each level's window")
    ap.add_argument("--repeats", type=int, default=2, help="rounds of both plans")
    args = ap.parse_args(argv)
    end_servers_on_sigterm()
    args.out.mkdir(parents=True, exist_ok=True)
    study = open_existing(args.study, args.storage)
    space = stored_space(study)
    chosen = pick(study, "knee")
    load = space.probes.load
    assert load is not None, "the space has no load probe"
    rate = args.rate or chosen.trial.metrics["slo.rate"]
    partition = first_partition(space)
    plans = sorted({1, max(1, len(partition.client_cpus))})  # one plan where the partition has one client core
    print(f"{args.study} trial {chosen.number} at {rate:g} requests/s; {partition.describe()}", flush=True)
    with serve(space, dict(chosen.trial.params), args.out / "server", partition) as served, pinned(partition.client_cpus):
        rows = asyncio.run(levels(served.handle, load, rate, plans, args.seconds, args.repeats))
    lines = summarize(rows)
    print("\n".join(lines))
    (args.out / "sender-ab.json").write_text(json.dumps({"rate": rate, "rows": rows, "summary": lines}, indent=2) + "\n")


if __name__ == "__main__":
    main()
