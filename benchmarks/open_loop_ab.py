"""Benchmark: what in the tool's own open loop moves its figures? One server of a study's pick
(from its stored space, on the partition's server cores, as a trial runs it), the tool's open loop
(LoadProbe.rate_level, pinned to the partition's client cores) at one request rate, in variants
interleaved (A B, then B A, ...), each level on a drained server. A variant is either

- a sender plan (the default, ``--plans``): senders planned for 1 client core (what
  tuner.probes._senders planned before its per-token cost was measured with spaced tokens) and for
  every client core (what it plans now). A sender that cannot keep up releases requests late
  (send lag) and stamps tokens late: its ITL p99 and TTFT p99 then measure the client; or
- a request body (``--request JSON``, repeated): fields over the space's ``probes.load.request``,
  sent from the plan for every client core. On SGLang each level also gets the engine's own view of
it from the server log (requests running, the decode step's time). On the H100 the tool's load (with ``min_tokens``,
  which SGLang serves with a penalizer on every decode step) broke at 38.88 requests/s where
  SGLang's bench (no ``min_tokens``) held 44.7; ``--request '{}' --request '{"min_tokens": 128}'``
  measures that one difference on one server.

Where the variants deliver the schedule and agree on TTFT and ITL within their spread across
repeats, the difference is not in the figures; where one variant's p99s exceed the other's by more
than that spread, it is.

    python benchmarks/open_loop_ab.py --study h200-sglang-goodput-rate --out $OUT [--rate 38.88] [--seconds 45] [--repeats 2]
    python benchmarks/open_loop_ab.py --study h200-sglang-goodput-rate --out $OUT --rate 38.88 \\
        --request '{}' --request '{"min_tokens": 128}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from goodput_crosscheck import first_partition

from tuner.app.read import open_existing, stored_space
from tuner.engines.sglang import DecodeStep, decode_steps
from tuner.probes import LoadProbe, Senders, ServerHandle
from tuner.results.pick import pick
from tuner.serving.server import end_servers_on_sigterm
from tuner.serving.trial import pinned, serve
from tuner.space import LoadProbeSpec

KEPT = (
    "senders", "client_cores", "offered_rate", "achieved_rate", "achieved_over_offered", "client_bound", "send_lag_p99",
    "completion_rate", "ttft_p99", "itl_p99", "tpot_p99", "output_tok_s", "growth", "growth_ci", "in_system_mean",
    "output_tokens_p50", "short_outputs",
)  # fmt: skip


@dataclass(frozen=True)
class Variant:
    """One arm: the client cores its senders are planned for, and fields over the load's request
    (None: a sender-plan arm, the space's request as it is)."""

    cores: int
    request: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        if self.request is None:
            return f"planned for {self.cores} core(s)"
        return f"request {json.dumps(self.request, sort_keys=True)}"


def variants(client_cores: int, requests: list[dict[str, Any]] | None) -> list[Variant]:
    """The arms: each request body from the plan for every client core, or (none given) the two
    sender plans, 1 core and every core (one arm where the partition has one client core)."""
    cores = max(1, client_cores)
    if requests:
        return [Variant(cores, r) for r in requests]
    return [Variant(c) for c in sorted({1, cores})]


async def levels(
    handle: ServerHandle, load: LoadProbeSpec, rate: float, arms: list[Variant], seconds: float, repeats: int
) -> list[dict[str, Any]]:
    """``repeats`` rounds of one level per arm, the order reversed every other round, each on a
    drained server."""
    spec = load.model_copy(update={"duration": seconds, "max_duration": seconds, "ci_target": 1e-9})
    probes = [LoadProbe(spec.model_copy(update={"request": {**spec.request, **(arm.request or {})}})) for arm in arms]
    rows: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(spec.request_timeout, connect=10.0), trust_env=False) as client:
        prompts = await probes[0].prompts(client, handle)  # the same prompts for every arm
        with Senders() as senders:
            for r in range(repeats):
                for i in range(len(arms)) if r % 2 == 0 else reversed(range(len(arms))):
                    arm, probe = arms[i], probes[i]
                    settled = await probe.settle(client, handle)
                    began = datetime.now()  # local time, as the engine's log stamps its lines
                    summary = await probe.rate_level(senders, handle, prompts, rate, seed=100 + len(rows), cores=arm.cores)
                    row = {"round": r, "arm": arm.label, "planned_for_cores": arm.cores, "request": arm.request}
                    row |= {k: summary.get(k) for k in KEPT} | settled
                    row["wall"] = [began.isoformat(timespec="seconds"), datetime.now().isoformat(timespec="seconds")]
                    rows.append(row)
                    print(
                        f"round {r} {arm.label} ({row['senders']} sender(s)): achieved/offered "
                        f"{row['achieved_over_offered']:.3f}, send lag p99 {row['send_lag_p99'] * 1000:.0f} ms, "
                        f"TTFT p99 {row['ttft_p99']:.3f} s, ITL p99 {row['itl_p99'] * 1000:.1f} ms, "
                        f"completed {row['completion_rate']:.1f}/s, {row['output_tok_s']:,.0f} tok/s, "
                        f"{row['in_system_mean']:.1f} in the system",
                        flush=True,
                    )
    return rows


def engine_view(rows: list[dict[str, Any]], steps: list[DecodeStep]) -> None:
    """Adds to each row SGLang's own view of its level, from the server log's ``Decode batch`` lines
    inside the level's wall-clock span: requests running (mean) and the decode step (median ms,
    prefill batches between steps included). Two bodies that cost the engine alike show alike."""
    for row in rows:
        start, end = (datetime.fromisoformat(t) for t in row["wall"])
        inside = [s for s in steps if start <= s.at <= end]
        timed = [s.step_ms for s in inside if s.step_ms is not None]
        row["engine_running_mean"] = statistics.fmean(s.running for s in inside) if inside else None
        row["engine_step_ms"] = statistics.median(timed) if timed else None


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """Per arm, in the order first run: the mean and spread (min-max over repeats) of each p99 and
    of the requests in the system."""
    lines = []
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        parts = []
        for key, unit, scale in (
            ("send_lag_p99", "ms", 1000),
            ("ttft_p99", "s", 1),
            ("itl_p99", "ms", 1000),
            ("in_system_mean", "requests", 1),
            ("engine_running_mean", "running (engine's log)", 1),
            ("engine_step_ms", "ms a decode step (engine's log)", 1),
        ):
            values = [r[key] * scale for r in mine if r.get(key) is not None]
            if values:
                parts.append(f"{key} {statistics.fmean(values):.3g} {unit} ({min(values):.3g}-{max(values):.3g})")
        lines.append(f"{arm}, {mine[0]['senders']} sender(s), {len(mine)} levels: " + ", ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", required=True)
    ap.add_argument("--storage")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rate", type=float, help="requests/s (default: the pick's SLO answer)")
    ap.add_argument("--seconds", type=float, default=45.0, help="each level's window")
    ap.add_argument("--repeats", type=int, default=2, help="rounds of every arm")
    ap.add_argument(
        "--request",
        action="append",
        type=json.loads,
        help="an arm: JSON fields over the space's probes.load.request (repeat; none: the two sender plans)",
    )
    args = ap.parse_args(argv)
    study = open_existing(args.study, args.storage)
    space = stored_space(study)
    load = space.probes.load
    assert load is not None, "the space has no load probe"
    for body in args.request or ():
        if not isinstance(body, dict):
            ap.error(f"--request {body!r}: a JSON object of request fields")
        LoadProbeSpec.model_validate({**load.model_dump(), "request": body})  # a field the probe owns: refused here
    end_servers_on_sigterm()
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = pick(study, "knee")
    rate = args.rate or chosen.trial.metrics["slo.rate"]
    partition = first_partition(space)
    arms = variants(len(partition.client_cpus), args.request)
    print(f"{args.study} trial {chosen.number} at {rate:g} requests/s; {partition.describe()}", flush=True)
    with serve(space, dict(chosen.trial.params), args.out / "server", partition) as served, pinned(partition.client_cpus):
        rows = asyncio.run(levels(served.handle, load, rate, arms, args.seconds, args.repeats))
    if space.engine == "sglang":
        engine_view(rows, decode_steps((args.out / "server" / "server.log").read_text(errors="replace").splitlines()))
    lines = summarize(rows)
    print("\n".join(lines))
    (args.out / "open-loop-ab.json").write_text(json.dumps({"rate": rate, "rows": rows, "summary": lines}, indent=2) + "\n")


if __name__ == "__main__":
    main()
