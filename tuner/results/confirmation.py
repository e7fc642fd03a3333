"""What a stored confirmation run says (``confirmed.<n>``, written by tuner.orchestration.confirm), as lines to show."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tuner.base.level import Level
from tuner.base.records import TrialOutcome
from tuner.host.fingerprint import HostFingerprint, apart
from tuner.space import LoadProbeSpec, SearchSpace
from tuner.trials import TrialRecord

__all__ = [
    "corrected",
    "describe",
    "describe_answer",
    "describe_step",
    "hold_past_kv_pool",
    "kv_pool",
    "other_host",
    "past_fast_path",
    "past_kv_pool",
    "run_verdict_text",
    "steps",
    "uncorrected_failure",
]


def describe_answer(answer: Mapping[str, float]) -> str:
    """An SLO answer, {"concurrency": N} or {"rate": R}: "N clients" or "R requests/s"."""
    return f"{answer['concurrency']:.0f} clients" if "concurrency" in answer else f"{answer.get('rate', 0):g} requests/s"


def describe_step(found: Mapping[str, Any], at: float) -> str:
    """A load a stored confirmation ran at, in its answer's unit: "N clients" or "R requests/s"."""
    return describe_answer({next(iter(found.get("answer") or {"rate": 0})): at})


def corrected(found: Mapping[str, Any] | None) -> Mapping[str, float] | None:
    """The load a stored confirmation found to hold below the search's answer (None: the answer
    held, or no step below it did, or it predates steps)."""
    if not found or not found.get("confirmed_answer"):
        return None
    kept = found["confirmed_answer"]
    return None if dict(kept) == dict(found.get("answer") or {}) else kept


def uncorrected_failure(found: Mapping[str, Any] | None) -> bool:
    """A confirmation that did not hold at the search's answer and found no load below that held
    (one stored before confirmations stepped down, without ``runs``, never looked: not this)."""
    return bool(found) and bool(found.get("runs")) and not found.get("held") and not found.get("confirmed_answer")  # type: ignore[union-attr]


def other_host(searched: Mapping[str, Any] | None, found: Mapping[str, Any] | None, number: int) -> str | None:
    """A line where trial ``number``'s search and its confirmation (``found``) ran on hosts that
    differ in what sets an engine's speed (None: the same host, alike, or one of them unknown)."""
    first = HostFingerprint.from_dict(searched)
    second = HostFingerprint.from_dict(found.get("host") if found else None)
    if first is None or second is None or not (differs := apart(first, second)):
        return None
    return (
        f"trial {number} was searched on {first.describe()} and confirmed on {second.describe()} "
        f"({'; '.join(differs)}): an SLO answer does not carry between hosts; search and confirm on the host that will serve"
    )


def kv_pool(space: SearchSpace, trial: TrialRecord, outcome: TrialOutcome | None = None) -> dict[str, int] | None:
    """The KV pool a confirmation's server had (its own count, else its trial's), in tokens and in
    requests of the load's one shape (prompt + output tokens): past that many requests in the system,
    new ones wait for KV. None where the engine said no size, or the requests have no one size (a
    workload's lengths, a dataset's texts) or share a prefix. vLLM on the H100 at 0.03 of its memory
    (2026-12-07): 82,368 tokens, 128 requests of 640; a minute broke where a burst filled it."""
    load = space.load_spec() or LoadProbeSpec()
    if load.workload is not None or load.dataset or load.prefix_tokens:
        return None
    tokens = (outcome.capacity.kv_tokens if outcome is not None else None) or trial.capacity.get("kv_tokens")
    if not tokens:
        return None
    per_request = load.prompt_tokens + load.output_tokens
    return {"tokens": int(tokens), "per_request": per_request, "requests": int(tokens) // per_request}


def hold_past_kv_pool(trial: TrialRecord, pool: Mapping[str, int] | None) -> str | None:
    """A line where the SLO search's hold at its answer had more requests in the system than the
    KV pool holds (``pool``, :func:`kv_pool`): minutes that a burst fills it break, and a hold of
    a minute or two may see none (vLLM on the H100, 2026-12-07: the hold at 56/s had up to 161
    against 125, held 100 s, and the confirmation broke in its sixth minute). None otherwise."""
    if not pool or not (cap := pool.get("requests")):
        return None
    held = [(float(at), h) for at, h in ((trial.slo or {}).get("holds") or {}).items() if h.get("held")]
    if not held:
        return None
    at, hold = max(held, key=lambda pair: pair[0])
    most = int(hold.get("in_system_max") or 0)
    if most <= cap:
        return None
    return (
        f"its hold at {at:g} had up to {most} requests in the system, past the {cap} the KV pool holds "
        f"({pool['tokens']:,} tokens, {pool['per_request']} a request): a burst that fills it breaks a minute that a "
        f"{hold.get('window_s') or 0:.0f}-s hold may not see; a long run tells (tune validate --confirm)"
    )


def describe(found: Mapping[str, Any], number: int) -> list[str]:
    """Lines that say what a stored confirmation (``confirmed.<n>``) found."""
    at = describe_answer(found.get("answer") or {})
    if found.get("failure") and not found.get("runs"):
        return [f"confirmation of trial {number} at {at}: no result ({found['failure']})", *_cut(found)]
    minutes = found.get("seconds", 0.0) / 60
    verdict = "held the SLO throughout" if found.get("held") else "did NOT hold the SLO throughout"
    ci = f" +- {found['goodput_ci']:,.1f}" if found.get("goodput_ci") is not None else ""
    short = ""
    if found.get("short_goodput") is not None:
        sci = f" +- {found['short_ci']:,.1f}" if found.get("short_ci") is not None else ""
        short = f" (the search's short probe: {found['short_goodput']:,.1f}{sci})"
    lines = [
        f"confirmation of trial {number}: {minutes:.1f} min at {at} on a fresh server {verdict}; goodput "
        f"{found.get('goodput', 0.0):,.1f}{ci}{short}, drift {found.get('drift', 0.0):+.1%} first to last slice"
    ]
    for part in (Level.from_dict(s) for s in found.get("slices") or []):
        p99 = ", ".join(f"{n.upper()} p99 {v * 1000:,.0f} ms" for n, v in (("ttft", part.ttft_p99), ("itl", part.itl_p99)) if v)
        broke = f": broke {'; '.join(part.broke)}" if part.broke else ""
        lines.append(f"  from {part.from_s or 0.0:,.0f} s: {part.output_tok_s or 0:,.1f} tok/s, {p99}{broke}")
    if found.get("broke"):
        lines.append(f"  the whole run broke: {'; '.join(found['broke'])}")
    return lines + past_fast_path(found) + past_kv_pool(found) + steps(found)


def past_fast_path(found: Mapping[str, Any]) -> list[str]:
    """A line per run whose requests in the system passed the most its config decodes on CUDA
    graphs (``fast_path``, where more may run): from which minute, and how many. On SGLang at
    40.4 requests/s (docs/goodput.md, the twelfth session) a run tipped past its 128 at a random
    minute and stayed, its steps 33-45 ms against 2-10: the log said why, nobody read it."""
    if not (cap := found.get("fast_path")):
        return []
    return [
        f"  at {describe_step(found, run.get('at', 0.0))}: requests in the system reached {most} from "
        f"{over[0].get('from_s') or 0.0:,.0f} s, past the {cap} this config decodes on CUDA graphs; "
        "above it each step runs without them, slower, and a queue feeds itself"
        for run, _, over, most in _runs_past(found, cap)
    ]


def past_kv_pool(found: Mapping[str, Any]) -> list[str]:
    """A line per run whose requests in the system passed what its server's KV pool holds
    (``kv_pool``: tokens, and requests of the load's one shape): in how many minutes, up to how
    many, and how many of those broke the SLO. There new requests wait for KV, and the tail of a
    minute with a burst breaks while the queue does not grow: vLLM on the H100 at 50.4 requests/s
    (docs/goodput.md, the fifteenth session) passed its 128 in each of its 7 minutes and broke 3,
    its growth 0.0003 +- 0.095/s. The knob is the pool: the engine's memory fraction."""
    pool = found.get("kv_pool") or {}
    if not (cap := pool.get("requests")):
        return []
    return [
        f"  at {describe_step(found, run.get('at', 0.0))}: requests in the system passed the {cap} that the KV pool "
        f"holds ({pool['tokens']:,} tokens, {pool['per_request']} a request) in {len(over)} of {len(minutes)} minutes, "
        f"up to {most}; {sum(1 for s in over if s.get('broke'))} of those broke the SLO. Past it new requests wait for KV "
        "and a burst breaks a minute's tail; a larger pool (the engine's memory fraction) raises it"
        for run, minutes, over, most in _runs_past(found, cap)
    ]


Minute = Mapping[str, Any]  # a stored run's slice, as its dict


def _runs_past(found: Mapping[str, Any], cap: int) -> Iterator[tuple[Mapping[str, Any], Sequence[Minute], list[Minute], int]]:
    """Each stored run whose requests in the system passed ``cap`` in some minute: the run, its
    minutes, those that passed, and the most it reached."""
    for run in found.get("runs") or ():
        minutes = run.get("slices") or ()
        if over := [s for s in minutes if (s.get("in_system_max") or 0) > cap]:
            yield run, minutes, over, max(int(s["in_system_max"]) for s in over)


def run_verdict_text(run: Mapping[str, Any]) -> str:
    """A stored confirmation run's verdict: "held throughout", or "did NOT hold (what broke)"."""
    why = "; ".join(run.get("broke") or []) or "a slice broke"
    return "held throughout" if run.get("held") else f"did NOT hold ({why})"


def steps(found: Mapping[str, Any]) -> list[str]:
    """What a stored confirmation did after its first run: each step down and its verdict, a cut
    and the run it ended, and where that leaves the answer (corrected, or none to size on)."""
    lines: list[str] = []
    at = describe_answer(found.get("answer") or {})
    for run in (found.get("runs") or [])[1:]:
        step = describe_step(found, run.get("at", 0.0))
        verdict = run_verdict_text(run)
        ci = f" +- {run['goodput_ci']:,.1f}" if run.get("goodput_ci") is not None else ""
        minutes = (run.get("seconds") or 0) / 60
        lines.append(f"  step down to {step}: {minutes:.1f} min, {verdict}; goodput {run.get('goodput', 0.0):,.1f}{ci}")
    if found.get("failure"):
        lines.append(
            f"  cut short after {len(found['runs'])} run(s): {found['failure']} (tune validate --confirm --resume goes on)"
        )
        lines += _cut(found)
    if (kept := corrected(found)) is not None:
        lines.append(f"  the answer is now {describe_answer(kept)}, the load that held throughout (the search said {at})")
    elif uncorrected_failure(found) and found.get("runs"):
        last = describe_step(found, found["runs"][-1].get("at", 0.0))
        on = "" if found.get("failure") else f" (tune validate --confirm --resume goes on a step below {last})"  # a cut says it
        lines.append(
            f"  no load held throughout within the steps and the time left: the search's {at} is no answer to size on{on}"
        )
    return lines


def _cut(found: Mapping[str, Any]) -> list[str]:
    """The line on the run a cut ended, as far as it had gone (none where no run was under way)."""
    run = found.get("cut_run")
    if not run:
        return []
    step = describe_step(found, run.get("at", 0.0))
    shown = [f"goodput {run['goodput']:,.1f}"] if run.get("goodput") is not None else []
    shown += [f"{n.upper()} p99 {run[n + '_p99'] * 1000:,.0f} ms" for n in ("ttft", "itl") if run.get(n + "_p99") is not None]
    if run.get("growth") is not None:
        shown.append(f"growth {run['growth']:+.3f}/s")
    so_far = f"broke the SLO so far ({'; '.join(run['broke'])})" if run.get("broke") else "within the SLO so far"
    lines = [
        f"  the run at {step} was cut after {run.get('seconds') or 0:,.0f} s of {run.get('of') or 0:,.0f}: {so_far}"
        + (f": {', '.join(shown)}" if shown else "")
        + " (not a verdict: the whole length decides)"
    ]
    if slices := run.get("slices"):
        broken = [s for s in slices if s.get("broke")]
        lines.append(
            f"    its {len(slices)} whole slice(s) so far: "
            + ("each within the SLO" if not broken else f"{len(broken)} broke it")
            + "".join(f"; from {s.get('from_s') or 0:,.0f} s: {'; '.join(s['broke'])}" for s in broken)
        )
    return lines
