"""The SLO probe's answer checked by another tool: the tune's pick on a fresh server, under the
engine's own bench (`vllm bench serve`, or SGLang's `python -m sglang.benchmark.serving
--dataset-name random-ids`) at the found concurrency N (``--max-concurrency N``) and at
``--above`` x N (1.15; earlier runs 1.25), with the same prompt and output lengths. At N the bench
must meet the SLO the tune held it to, above it miss it; the tune's goodput must be within 5 % of
the bench's output throughput at N. The server runs from the recorded argv (on the partition's
server cores, as it ran); every bench process is pinned to the partition's client cores, as the
tool pins its own clients.

A study whose SLO probe ran open loop (``probes.slo.mode: rate``) is checked the same way at its
request rate R and ``--above`` x R (``--request-rate``: Poisson arrivals, no client limit), each
run ``--seconds`` long (default 5 minutes of arrivals), the load split over ``--split K`` bench processes at R/K each, started
together (one asyncio client process falls behind above ~65 requests/s here: it must show that it
delivered its rate). Their per-request results (``--save-detailed``) are merged into one TTFT
and ITL p99; each process's delivered rate is its requests over the span of its send times
(``start_times``; SGLang's bench keeps none: its requests over its duration less one mean
request), and the merged achieved/offered must be >= 0.98 for the run to count. An open-loop run is
judged twice: as one window, and minute by minute as the tool's confirmation judges its own
(``minutes``): on the H100 vLLM at 50.4/s met the SLO over 7 minutes and broke 3 of them.
The closed loop splits too (``--split K`` > 1): N clients shared among K processes
(``--max-concurrency``), each showing the concurrency it kept (its mean requests in flight
between its first and last send) for the same 0.98.

Prints one line per level and the ratio goodput / bench throughput at N; writes the bench's raw
results and a summary JSON under --out.

    python benchmarks/goodput_crosscheck.py --study h200-vllm-goodput --out $OUT [--prompts-per-client 20]
    python benchmarks/goodput_crosscheck.py --study h200-vllm-goodput-rate --out $OUT [--seconds 300]
    python benchmarks/goodput_crosscheck.py --study h200-sglang-goodput-rate --out $OUT --split 4   # SGLang's own bench
    python benchmarks/goodput_crosscheck.py --study h200-sglang-goodput-rate --out $OUT --only answer   # one level per server
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner import engines
from tuner.app.read import open_existing, stored_space
from tuner.base.artifacts import RunDir
from tuner.base.records import Capacity
from tuner.host.fingerprint import HostFingerprint, apart, this_host
from tuner.host.partitions import Partition, free_port, make_partitions
from tuner.host.processes import terminate_group
from tuner.probes import ServerHandle, in_flight
from tuner.results.confirmation import corrected, run_verdict_text, uncorrected_failure
from tuner.results.export import build_export
from tuner.results.pick import pick
from tuner.serving.server import ServerProcess, end_servers_on_sigterm
from tuner.space import SearchSpace, SloTargets


def first_partition(space: SearchSpace) -> Partition:
    """The space's first partition, where its trials ran (a fresh server of a check runs there too)."""
    size = space.hardware.per_trial if isinstance(space.hardware.per_trial, int) else 1
    return make_partitions(space.hardware.kind, list(space.hardware.devices), size)[0]


def bench_argv(
    url: str,
    model: str,
    flag: list[str],
    prompts: int,
    lengths: tuple[int, int],
    out: Path,
    name: str,
    seed: int,
    *,
    detailed: bool = False,
) -> list[str]:
    """One `vllm bench serve` at ``flag`` (``--max-concurrency N`` or ``--request-rate R``), random
    prompts of ``lengths`` (in, out) tokens, its result saved as ``out/name`` (``detailed``: with
    every request's times, which a merge of several processes reads)."""
    return [
        sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
        "--backend", "vllm", "--base-url", url, "--model", model, "--tokenizer", model,
        "--dataset-name", "random", "--random-input-len", str(lengths[0]), "--random-output-len", str(lengths[1]),
        "--ignore-eos", "--num-prompts", str(prompts), *flag,
        "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "99",
        "--save-result", *(["--save-detailed"] if detailed else []),
        "--result-dir", str(out), "--result-filename", name, "--seed", str(seed),
    ]  # fmt: skip


def sglang_argv(
    url: str, model: str, flag: list[str], prompts: int, lengths: tuple[int, int], out: Path, name: str, seed: int
) -> list[str]:
    """One SGLang bench (``sglang.benchmark.serving``, OpenAI completions) at ``flag``: random token
    ids of exactly ``lengths`` (in, out) tokens (``--random-range-ratio 1``), every request's TTFT,
    ITLs and error kept (``--output-details``) in the JSONL ``out/name``."""
    return [
        sys.executable, "-m", "sglang.benchmark.serving", "--backend", "sglang-oai", "--base-url", url,
        "--model", model, "--tokenizer", model, "--dataset-name", "random-ids",
        "--random-input-len", str(lengths[0]), "--random-output-len", str(lengths[1]), "--random-range-ratio", "1.0",
        "--num-prompts", str(prompts), *flag, "--output-file", str(out / name), "--output-details", "--seed", str(seed),
    ]  # fmt: skip


def sglang_result(path: Path) -> dict:
    """The last result SGLang's bench appended to ``path``, in the names :func:`merge` reads
    (``mean_e2el_ms``, ``failed``: vLLM's)."""
    r = json.loads(path.read_text().strip().splitlines()[-1])
    errors = r.get("errors") or []
    return {**r, "mean_e2el_ms": r.get("mean_e2e_latency_ms", 0.0), "failed": sum(1 for e in errors if e)}


def stubs(out: Path) -> Path:
    """A folder for PYTHONPATH with the module SGLang's dataset code imports at start and the
    random-ids dataset never calls (shared/gpu/README.md): ``datasets.load_dataset``, raising."""
    folder = out / "stubs"
    (folder / "datasets").mkdir(parents=True, exist_ok=True)
    (folder / "datasets" / "__init__.py").write_text(
        "def load_dataset(*args, **kwargs):\n    raise RuntimeError('no datasets package here: random-ids needs none')\n"
    )
    return folder


def bench(url: str, model: str, level: list[str], prompts: int, prompt_tokens: int, output_tokens: int, out: Path) -> dict:
    """One `vllm bench serve` run at ``level`` (``--max-concurrency N`` or ``--request-rate R``); its saved result."""
    tag = f"c{level[1]}" if level[0] == "--max-concurrency" else f"r{level[1]}"
    name = f"bench-{tag}.json"
    argv = bench_argv(url, model, level, prompts, (prompt_tokens, output_tokens), out, name, len(name) + prompts)
    with (out / f"bench-{tag}.log").open("w") as log:
        subprocess.run(argv, check=True, stdout=log, stderr=subprocess.STDOUT)
    return json.loads((out / name).read_text())


DELIVERED = 0.98  # a bench run that sent less of its offered rate is not a check of the server
DRAIN_S = 120.0  # an open-loop run still going this long after its arrivals' span is behind them (within the SLO: ~2 s)


def shares(total: float, k: int, *, whole: bool) -> list[float]:
    """``total`` split over ``k`` processes: rate/k each, or whole clients (the first ones one more)."""
    if not whole:
        return [total / k] * k
    n = int(total)
    return [float(n // k + (1 if i < n % k else 0)) for i in range(min(k, n))]


def bench_split(
    url: str,
    model: str,
    level: float,
    k: int,
    load: tuple[float, int, int],
    out: Path,
    *,
    closed: bool = False,
    tool: str = "vllm",
    pin: tuple[int, ...] = (),
    within: float | None = None,
    count: Callable[[], int | None] | None = None,
) -> dict:
    """``level`` from ``k`` bench processes (``tool``: vllm or sglang) started together, each pinned
    to the cores ``pin``: requests/s at level/k each, or (``closed``) level clients shared among
    them with ``--max-concurrency``. Their per-request results merged: one TTFT and ITL p99 over
    every request, the output throughputs summed, and what they delivered
    (``achieved_over_offered``). ``load`` is (seconds of arrivals, or requests per client when
    closed; prompt tokens; output tokens).

    Processes still running ``within`` seconds after they started are ended: the result is then
    only ``cut`` (the bound, the parts left, and the requests the engine had in flight by its own
    ``count`` at that moment), because a bench writes its results only when all its requests came
    back. An open loop that has not finished long after its last arrival is behind its arrivals:
    on the H100 1.15 x 36.36 requests/s ran 256 requests and queued up to 476 from its first
    minute, and its 300 s of arrivals had not drained 22 s after the last, when the call's clock
    cut it with nothing written."""
    amount, prompt_tokens, output_tokens = load
    env = dict(os.environ)
    if tool == "sglang":
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stubs(out)), env.get("PYTHONPATH")) if p)
    runs = []
    for i, share in enumerate(shares(level, k, whole=closed)):
        tag = f"{'c' if closed else 'r'}{level:g}-p{i}"
        flag = ["--max-concurrency", f"{share:g}"] if closed else ["--request-rate", f"{share:g}"]
        prompts = max(2, round(share * amount))
        name = f"bench-{tag}.json"
        if tool == "sglang":
            argv = sglang_argv(url, model, flag, prompts, (prompt_tokens, output_tokens), out, name, 1000 + i)
        else:
            argv = bench_argv(url, model, flag, prompts, (prompt_tokens, output_tokens), out, name, 1000 + i, detailed=True)
        runs.append((tag, argv))
    seen: dict[str, int | None] = {}

    def at_cut() -> None:
        seen["in_flight"] = count() if count is not None else None

    codes = pinned_clients([(argv, out / f"bench-{tag}.log") for tag, argv in runs], pin, env, within=within, when_cut=at_cut)
    for (tag, _), code in zip(runs, codes, strict=False):
        if code not in (0, None):
            raise RuntimeError(f"{tool} bench (part {tag}) exited {code}: see {out}/bench-{tag}.log")
    if None in codes:
        left = [tag for (tag, _), code in zip(runs, codes, strict=True) if code is None]
        return {"cut": {"after_s": within, "parts_left": left, "in_flight": seen.get("in_flight")}}
    results = [
        sglang_result(out / f"bench-{tag}.json") if tool == "sglang" else json.loads((out / f"bench-{tag}.json").read_text())
        for tag, _ in runs
    ]
    merged = merge(results, level, closed=closed)
    if not closed:  # its minutes, judged as the tool's confirmation judges its own
        merged["minutes"] = minutes(results, level, amount)
    return merged


def pinned_clients(
    runs: list[tuple[list[str], Path]],
    pin: tuple[int, ...],
    env: dict[str, str],
    *,
    within: float | None = None,
    when_cut: Callable[[], None] | None = None,
) -> list[int | None]:
    """Client processes (each an argv and the log its output goes to) started together, each in its
    own session, pinned to the cores ``pin`` (none: unpinned), and waited for in order: their exit
    codes, up to the first that failed. ``within`` seconds (None: no bound) is the most all of them
    together may take: each still running then gets None for its code, and ``when_cut`` is called
    before they are ended (to read the server while their requests are still in it). Every group
    is ended afterwards, also on a timeout's SIGTERM (SystemExit here), which once left two bench
    parts running on the H200."""
    taskset = ["taskset", "--cpu-list", ",".join(map(str, pin))] if pin else []
    started: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
    codes: list[int | None] = []
    until = None if within is None else time.monotonic() + within
    try:
        for argv, path in runs:
            sink = path.open("wb")
            started.append(
                (
                    subprocess.Popen([*taskset, *argv], stdout=sink, stderr=subprocess.STDOUT, start_new_session=True, env=env),
                    sink,
                )
            )
        for i, (proc, _) in enumerate(started):
            try:
                codes.append(proc.wait(None if until is None else max(0.0, until - time.monotonic())))
            except subprocess.TimeoutExpired:  # this one and those after it: their codes where they ended, else None
                codes += [later.poll() for later, _ in started[i:]]
                if when_cut is not None:
                    when_cut()
                break
            if codes[-1] != 0:
                break
    finally:
        for proc, sink in started:
            terminate_group(proc.pid, term_timeout=5.0, proc=proc)
            sink.close()
    return codes


def _in_flight(r: dict) -> float | None:
    """Mean requests in flight of one closed-loop part between its first and last send: its
    clients stay busy there while requests remain, so this is the concurrency it delivered.
    A request is in flight from its send to its last token (TTFT plus its inter-token gaps)."""
    starts, ttfts, itls = r.get("start_times") or [], r.get("ttfts") or [], r.get("itls") or []
    if len(starts) < 2 or len(ttfts) != len(starts):
        return None
    lo, hi = min(starts), max(starts)
    if hi <= lo:
        return None
    ends = [s + (t or 0.0) + sum(g) for s, t, g in zip(starts, ttfts, itls or [[]] * len(starts), strict=False)]
    busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in zip(starts, ends, strict=True))
    return busy / (hi - lo)


def merge(results: list[dict], level: float, *, closed: bool = False) -> dict:
    """One result from several bench processes' detailed results (seconds in their lists).
    ``level`` is the offered rate, or (``closed``) the offered number of clients."""
    ttfts, itls, achieved, spans = [], [], 0.0, []
    for r in results:
        errors = r.get("errors") or [""] * len(r.get("ttfts") or [])
        ttfts += [t for t, e in zip(r.get("ttfts") or [], errors, strict=False) if not e and t]
        itls += [g for gaps, e in zip(r.get("itls") or [], errors, strict=False) if not e for g in gaps]
        if closed:
            held = _in_flight(r)
            if held is not None:
                achieved += held
                spans.append(held)
            continue
        starts = sorted(r.get("start_times") or [])
        if len(starts) >= 2 and starts[-1] > starts[0]:
            achieved += (len(starts) - 1) / (starts[-1] - starts[0])
            spans.append(starts[-1] - starts[0])
    merged = {
        "completed": sum(r.get("completed", 0) for r in results),
        "failed": sum(r.get("failed", 0) or 0 for r in results),
        "output_throughput": sum(r["output_throughput"] for r in results),
        "p99_ttft_ms": 1000 * float(np.percentile(ttfts, 99)) if ttfts else None,
        "p99_itl_ms": 1000 * float(np.percentile(itls, 99)) if itls else None,
        "parts": len(results),
        "requests_per_part": [r.get("completed", 0) + (r.get("failed", 0) or 0) for r in results],
    }
    key = "achieved_concurrency" if closed else "achieved_rate"
    if len(spans) == len(results):
        merged.update({key: achieved, "achieved_over_offered": achieved / level, "delivery_from": "send times"})
    elif not closed:  # no send times saved: the requests over the run's duration less one mean request (the drain)
        achieved = sum(
            (r["completed"] + (r.get("failed", 0) or 0)) / max(1e-9, r["duration"] - r["mean_e2el_ms"] / 1000) for r in results
        )
        merged.update(achieved_rate=achieved, achieved_over_offered=achieved / level, delivery_from="duration less a request")
    return merged


SLICE_S = 60.0  # the tool's confirmation judges each minute (probes.confirm.slice); the bench's minutes are judged so too


def minutes(results: list[dict], level: float, seconds: float, *, slice_s: float = SLICE_S) -> dict:
    """The open-loop parts' requests by the ``slice_s`` of the run they were sent in, merged over
    the parts: each slice's requests, TTFT and ITL p99 and error rate, to be judged as the tool's
    confirmation judges its minutes (a run holds throughout only where every one holds). A send's
    time is its ``start_times`` (vLLM: ``time.perf_counter``, one clock for every process of the
    host), from the first send of any part; SGLang's bench keeps none, so its i-th request of a
    part at R/K is put at i x K / R (Poisson arrivals in order: off by about sqrt(i) x K / R, 4 s
    at the 3,000th request of a part at 14/s). Sends after the last whole slice count in it."""
    count = max(1, int(seconds // slice_s))
    by_slice: list[dict[str, list]] = [{"ttfts": [], "itls": [], "tpots": [], "errors": []} for _ in range(count)]
    sent = [r.get("start_times") or [] for r in results]
    timed = all(len(s) == len(r.get("ttfts") or []) and s for s, r in zip(sent, results, strict=True))
    first = min(min(s) for s in sent) if timed else 0.0
    for part, r in enumerate(results):
        ttfts, itls = r.get("ttfts") or [], r.get("itls") or [[]] * len(r.get("ttfts") or [])
        errors = r.get("errors") or [""] * len(ttfts)
        for i, (ttft, gaps, error) in enumerate(zip(ttfts, itls, errors, strict=False)):
            at = sent[part][i] - first if timed else i * len(results) / level
            bucket = by_slice[min(count - 1, max(0, int(at // slice_s)))]
            bucket["errors"].append(bool(error))
            if not error and ttft:
                bucket["ttfts"].append(ttft)
                bucket["itls"] += gaps
                if gaps:
                    bucket["tpots"].append(sum(gaps) / len(gaps))
    rows = []
    for k, b in enumerate(by_slice):
        n = len(b["errors"])
        rows.append(
            {
                "from_s": k * slice_s, "requests": n,
                "ttft_p99": float(np.percentile(b["ttfts"], 99)) if b["ttfts"] else None,
                "itl_p99": float(np.percentile(b["itls"], 99)) if b["itls"] else None,
                "tpot_p99": float(np.percentile(b["tpots"], 99)) if b["tpots"] else None,
                "error_rate": sum(b["errors"]) / n if n else 0.0,
            }
        )  # fmt: skip
    return {"slice_s": slice_s, "timed_by": "send times" if timed else "request order (i x K / R)", "slices": rows}


def throughout(by_minute: Mapping[str, Any], broke: list[str]) -> str:
    """A line on a run's minutes: held in each, or which broke (and how the sends were timed)."""
    n, how = len(by_minute["slices"]), by_minute["timed_by"]
    if not broke:
        return f"held in each of its {n} minutes (sends timed by {how})"
    return f"broke in {len(broke)} of its {n} minutes ({'; '.join(broke)}; sends timed by {how})"


def _every(row: Mapping[str, Any], said: str, broke: bool = False) -> str:
    if "broke_minutes" not in row:
        return ""
    return f"; {said}: {bool(row['broke_minutes']) if broke else not row['broke_minutes']}"


def judged_minutes(targets: SloTargets, by_minute: Mapping[str, Any]) -> list[str]:
    """The slices that break ``targets``, one line each ("minute 3: ttft_p99 1.18 > 1")."""
    width = by_minute["slice_s"]
    broke = []
    for k, row in enumerate(by_minute["slices"]):
        if row["requests"] and (said := targets.violated({n: row[n] for n in ("ttft_p99", "itl_p99", "tpot_p99", "error_rate")})):
            row["broke"] = said
            name = "minute" if width == 60 else f"slice of {width:g} s"
            broke.append(f"{name} {k + 1}: " + "; ".join(said))
    return broke


def confirmation_at(confirmed: Mapping[str, Any] | None, at: float) -> tuple[tuple[float, float] | None, str]:
    """The tool's own figure at a load ``--at`` names: the goodput (and its CI) of the study's
    confirmation run at that load, and a line saying what that run found; none where no run was there."""
    for run in (confirmed or {}).get("runs") or ():
        if math.isclose(float(run["at"]), at, rel_tol=1e-6):
            goodput, ci, seconds = float(run["goodput"]), float(run.get("goodput_ci") or 0.0), float(run.get("seconds") or 0)
            said = f"its confirmation run of {seconds:.0f} s {run_verdict_text(run)}, goodput {goodput:,.1f} +- {ci:,.1f}"
            return (goodput, ci), said
    return None, "no confirmation run at that load (no ratio)"


def load_to_bench(
    metrics: Mapping[str, Any], confirmed: Mapping[str, Any] | None, rate: bool, at: float | None
) -> tuple[float, tuple[float, float] | None, str]:
    """The load the bench checks, the tool's own goodput there and a line saying whose it is: ``--at``
    where given; else the answer the tool prints, the load its confirmation stepped down to and
    held where it corrected the search's answer (status, export and the pick size on that one), else
    the search's answer with the search's goodput."""
    unit = "requests/s" if rate else "clients"
    searched = metrics["slo.rate"] if rate else int(metrics["slo.concurrency"])
    if at is not None:
        load = at if rate else int(at)
        figure, said = confirmation_at(confirmed, load)
        return load, figure, f"bench at {load} {unit}, as asked (--at), not at the study's answer; the tool there: {said}"
    if (kept := corrected(confirmed)) is not None:
        load = float(kept["rate"]) if rate else int(kept["concurrency"])
        figure, said = confirmation_at(confirmed, load)
        return (
            load,
            figure,
            f"bench at {load:g} {unit}, the answer its confirmation corrected {searched:g} to; the tool there: {said}",
        )
    goodput, ci = metrics["slo.goodput"], metrics.get("slo.goodput_ci", 0.0)
    return searched, (goodput, ci), f"tune: the search's answer, {searched:g} {unit}, goodput {goodput:,.1f} +- {ci:,.1f}"


def engine_count(url: str, model: str, adapter: engines.EngineAdapter) -> int | None:
    """Requests the engine has running and queued by its own count (its adapter's
    ``in_flight_source``); None where it keeps none or the server does not answer."""
    handle = ServerHandle(url, model, Capacity(), in_flight_source=adapter.in_flight_source)

    async def read() -> int | None:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await in_flight(client, handle)

    return asyncio.run(read())


def behind(cut: Mapping[str, Any], seconds: float) -> str:
    """Why a bench run ended by its bound broke: still going that long after its arrivals' span."""
    count = cut.get("in_flight")
    held = f", {count} requests in the engine by its own count" if count is not None else ""
    return (
        f"behind its arrivals: {len(cut['parts_left'])} bench part(s) still running {cut['after_s'] - seconds:g} s after "
        f"its {seconds:g} s of arrivals{held}; ended there"
    )


def ratio_at_answer(tool_goodput: tuple[float, float] | None, at: Mapping[str, Mapping[str, Any]]) -> float | None:
    """The tool's goodput over the bench's output throughput at the answer (None: either missing)."""
    bench_tok_s = at.get("answer", {}).get("output_tok_s")
    return tool_goodput[0] / bench_tok_s if tool_goodput and bench_tok_s else None


def _sent(r: dict) -> dict:
    keys = ("achieved_rate", "achieved_concurrency", "achieved_over_offered")
    return {k: r[k] for k in (*keys, "delivery_from", "parts", "requests_per_part") if k in r}


def _tune_host(searched: HostFingerprint | None, differs: list[str] | None) -> str:
    """What the bench's host is to the tune's: the same, unknown, or how they differ."""
    if searched is None:
        return "the tune's host is unknown (a study from before 2026-12-06): the comparison may be across hosts"
    if not differs:
        return "the tune ran on this host"
    return f"the tune ran on another host ({'; '.join(differs)}): its answer is no check of this one"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", required=True)
    ap.add_argument("--storage")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts-per-client", type=int, default=20, help="requests per client: ramp and drain under 5 %%")
    ap.add_argument("--seconds", type=float, default=300.0, help="open loop: each run's arrivals (prompts = rate x seconds)")
    ap.add_argument("--above", type=float, default=1.15, help="the second level: this x the answer (it must miss the SLO)")
    ap.add_argument(
        "--above-seconds", type=float, help="open loop: the second level's arrivals (default --seconds; a break shows early)"
    )
    ap.add_argument(
        "--split",
        type=int,
        default=4,
        help="bench processes sharing the load: R/K requests/s or N/K clients each (1: one process)",
    )
    ap.add_argument(
        "--only",
        choices=("answer", "above"),
        help="one of the two levels on its own server (two 10-minute commands on the H200 hold 5 minutes each)",
    )
    ap.add_argument(
        "--drain",
        type=float,
        default=DRAIN_S,
        help="open loop: seconds a run may go on after its arrivals' span before it is ended and called behind its arrivals",
    )
    ap.add_argument("--force", action="store_true", help="bench an SLO answer that broke its confirmation all the same")
    ap.add_argument(
        "--at",
        type=float,
        help="bench at this load (requests/s, or clients) instead of the study's answer: a step its confirmation ran, say; "
        "the tool's figure beside it is that confirmation run's",
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    study = open_existing(args.study, args.storage)
    space = stored_space(study)
    chosen = pick(study, "knee")
    m = chosen.trial.metrics
    if (
        uncorrected_failure(chosen.trial.confirmed) and not args.force and args.at is None
    ):  # on the H100 it benched 1.15 x a 48/s known to break
        sys.exit(
            f"goodput_crosscheck: trial {chosen.number}'s SLO answer did not hold its confirmation and no load below it held "
            f"(`tune status --study {args.study}`): no answer to check; `tune validate --confirm --resume` goes on, "
            "--force benches it anyway"
        )
    end_servers_on_sigterm()
    slo, load = space.probes.slo, space.probes.load
    assert slo is not None and slo.targets is not None and load is not None, (slo, load)
    targets, rate = slo.targets, slo.mode == "rate"
    unit = "requests/s" if rate else "clients"
    answer, tool_goodput, said = load_to_bench(m, chosen.trial.confirmed, rate, args.at)
    print(said)
    assert answer > 0, m
    levels = [answer, round(args.above * answer, 2)] if rate else [answer, math.ceil(args.above * answer)]
    tool = "sglang" if space.engine == "sglang" else "vllm"
    partition = first_partition(space)
    # an answer belongs to its host (docs/goodput.md, 2026-12-06: the same load ran 2 x slower on another H100 host)
    here = this_host(partition.devices, partition.server_cpus)
    searched = HostFingerprint.from_dict(chosen.trial.host)
    hosts_apart = apart(searched, here) if searched is not None else None
    print(f"bench host: {here.describe()}; " + _tune_host(searched, hosts_apart))
    port = free_port("127.0.0.1", 33000, 500)
    exported = build_export(study, space, chosen, port=port, run_dir=RunDir.for_study(args.study).root)
    adapter = engines.get(space.engine)
    model = adapter.served_model_name(adapter.resolve_model(space.model.path))
    rows: list[dict[str, Any]] = []

    def write() -> None:  # after each level: a run cut from outside keeps the levels before it
        at = {row["level"]: row for row in rows}
        summary = {
            "study": args.study, "trial": chosen.number, "params": dict(chosen.trial.params), "slo": targets.model_dump(),
            "tune": {k: v for k, v in m.items() if k.startswith("slo.")},
            "mode": slo.mode, "bench": rows, "goodput_over_bench_at_n": ratio_at_answer(tool_goodput, at), "at": args.at,
            "benched": answer, "tool_goodput": tool_goodput,
            "host": here.to_dict(), "tune_host": dict(chosen.trial.host) if chosen.trial.host else None,
            "hosts_apart": hosts_apart,
        }  # fmt: skip
        (args.out / f"crosscheck{'-' + args.only if args.only else ''}.json").write_text(json.dumps(summary, indent=2) + "\n")

    with ServerProcess(
        exported.command, adapter=adapter, log_path=args.out / "server.log", host="127.0.0.1", port=port, model=model,
        startup_timeout=space.server.startup_timeout,
    ) as server:  # fmt: skip
        server.wait_ready()
        for i, level in enumerate(levels):
            if args.only and args.only != ("answer", "above")[i]:
                continue
            if args.split > 1 or rate or tool == "sglang":
                seconds = args.above_seconds if i and args.above_seconds else args.seconds
                amount = seconds if rate else args.prompts_per_client
                shape = (amount, load.prompt_tokens, load.output_tokens)
                r = bench_split(
                    server.url, model, level, args.split, shape, args.out, closed=not rate, tool=tool, pin=partition.client_cpus,
                    within=seconds + args.drain if rate else None,
                    count=functools.partial(engine_count, server.url, model, adapter),
                )  # fmt: skip
            else:
                prompts = args.prompts_per_client * int(level)
                flag = ["--max-concurrency", str(level)]
                r = bench(server.url, model, flag, prompts, load.prompt_tokens, load.output_tokens, args.out)
            key = "rate" if rate else "concurrency"
            if "cut" in r:
                rows.append(
                    {"level": ("answer", "above")[i], key: level, "output_tok_s": None, "broke": [behind(r["cut"], seconds)], **r}
                )
                print(f"bench at {level:g} {unit}: misses the SLO ({rows[-1]['broke'][0]})")
                write()
                continue
            figures = {
                name: r[f"p99_{name.split('_')[0]}_ms"] / 1000
                for name in ("ttft_p99", "itl_p99", "tpot_p99")
                if r.get(f"p99_{name.split('_')[0]}_ms") is not None
            }
            failed = r.get("failed", 0) or 0
            figures["error_rate"] = failed / max(1, r.get("completed", 0) + failed)
            broke = targets.violated(figures)
            delivered = r.get("achieved_over_offered")
            if delivered is not None and delivered < DELIVERED:
                broke = [f"not delivered: {delivered:.3f} of the offered {unit} < {DELIVERED}", *broke]
            by_minute = r.get("minutes")
            minute_broke = judged_minutes(targets, by_minute) if by_minute else []
            rows.append(
                {
                    "level": ("answer", "above")[i],
                    key: level,
                    "output_tok_s": r["output_throughput"],
                    **figures,
                    "broke": broke,
                    **_sent(r),
                    **({"minutes": by_minute, "broke_minutes": minute_broke} if by_minute else {}),
                }
            )
            sent = f", achieved/offered {delivered:.3f} ({r['delivery_from']})" if delivered is not None else ""
            print(
                f"bench at {level:g} {unit}: {r['output_throughput']:,.1f} output tok/s, TTFT p99 {figures['ttft_p99']:.3f} s, "
                f"ITL p99 {figures['itl_p99'] * 1000:.1f} ms, {failed} failed{sent}: "
                + ("meets the SLO" if not broke else "misses the SLO (" + "; ".join(broke) + ")")
                + (f"; {throughout(by_minute, minute_broke)}" if by_minute else "")
            )
            write()
    at = {row["level"]: row for row in rows}
    ratio = ratio_at_answer(tool_goodput, at)
    if tool_goodput is not None:
        print(f"tune: trial {chosen.number} at {answer:g} {unit}, goodput {tool_goodput[0]:,.1f} +- {tool_goodput[1]:,.1f}")
    if ratio is not None:
        print(f"ratio goodput / bench output throughput at {answer:g}: {ratio:.3f} (within 5 %: {abs(ratio - 1) <= 0.05})")
    if "answer" in at:
        print(f"bench meets the SLO at the answer: {not at['answer']['broke']}{_every(at['answer'], 'in every minute')}")
    if "above" in at:
        missed = bool(at["above"]["broke"])
        print(f"bench misses the SLO at {args.above:g} x: {missed}{_every(at['above'], 'in some minute', True)}")
    delivered = ", ".join(f"{row['level']} {row['achieved_over_offered']:.3f}" for row in rows if "achieved_over_offered" in row)
    if delivered:
        print(f"bench achieved/offered: {delivered} (each >= {DELIVERED} for the run to count)")
    if rate:
        levels = (m.get("slo.achieved_over_offered"), m.get("slo.completion_rate"), m.get("slo.offered_rate"))
        shown = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in levels]
        print(f"tune at R: achieved/offered {shown[0]}, completed {shown[1]} requests/s of {shown[2]} offered")


if __name__ == "__main__":
    main()
