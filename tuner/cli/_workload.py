"""`tune workload stats FILE`: what a trace holds (rate, lengths, reuse): a Mooncake-format JSONL
trace, or SGLang's agentic-trace JSON (a ``.json`` file)."""

from __future__ import annotations

import typer

from tuner.cli._common import echo
from tuner.workload import agentic_stats, read_agentic, read_trace, trace_stats

app = typer.Typer(help="Inspect workloads: traces and what they ask of a server.", no_args_is_help=True)


@app.command("stats")
def stats(
    path: str = typer.Argument(
        ..., help="a JSONL trace (Mooncake: timestamp, input_length, output_length, hash_ids) or an agentic-trace .json"
    ),
    block: int = typer.Option(512, "--block", min=1, help="tokens per hash id (a Mooncake trace)"),
    output: int = typer.Option(
        220, "--output", min=1, help="answer tokens per turn (an agentic trace; 220: its bench's default)"
    ),
) -> None:
    """Print what a trace holds: requests, span and rate, prompt and output lengths, and the share
    of prompt tokens a cache could serve."""
    if path.endswith(".json"):
        _agentic(path, output)
        return
    found = trace_stats(read_trace(path, block), block)
    rate = f"{found['rate']:.3g} requests/s" if found["rate"] else "one instant"
    echo(f"{path}: {found['requests']:,} requests over {found['span_s']:,.1f} s ({rate})")
    for name in ("prompt", "output"):
        d = found[name]
        echo(f"  {name} tokens: mean {d['mean']:,.1f}, p50 {d['p50']:,.0f}, p90 {d['p90']:,.0f}, p99 {d['p99']:,.0f}")
    echo(
        f"  reuse: {found['reusable_share']:.1%} of {found['prompt_tokens']:,} prompt tokens in blocks an earlier "
        f"request sent ({found['blocks']:,} distinct blocks of {block})"
    )


def _agentic(path: str, output: int) -> None:
    found = agentic_stats(read_agentic(path), output)
    t, d = found["turns"], found["prompt"]
    echo(f"{path}: {found['conversations']:,} conversations, {found['requests']:,} turns (an agentic trace, read as sessions)")
    echo(f"  turns per conversation: mean {t['mean']:,.1f}, p50 {t['p50']:,.0f}, p90 {t['p90']:,.0f}, p99 {t['p99']:,.0f}")
    echo(f"  prompt tokens: mean {d['mean']:,.1f}, p50 {d['p50']:,.0f}, p90 {d['p90']:,.0f}, p99 {d['p99']:,.0f}")
    if found["systems"]:
        echo(
            f"  system prompts: {found['with_system']:,} conversations open with one of {found['systems']:,} "
            f"(~{found['system_tokens']:,.0f} tokens on average, estimated by their share of the first turn's text)"
        )
    echo(
        f"  reuse: {found['reusable_share']:.1%} of {found['prompt_tokens']:,} prompt tokens resent from the turn "
        f"before or a system prompt sent before (answers of {output:,} tokens, resent as new text)"
    )
