"""SGLang's agentic-trace JSON read as sessions (its ``bench_serving --dataset-name agentic_trace``).

The file is ``{"conversations": [[turn, turn, ...], ...]}``; a turn is ``{"messages": [...],
"prompt_tokens": N}``: the new messages of that turn and the whole prompt's tokens by the trace's
tokenizer (the history included: an agent resends it every turn). The messages' text is not
replayed (prompts are made of one-token words, so lengths stay exact by the server's count); the
counts are: a turn's new tokens are its prompt less the history before it (the previous prompt and
the answer to it). A turn whose prompt is shorter than that history (the agent cut or compacted it)
starts the history again. SGLang's reader ignores the turns without messages; so does this one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tuner.base.stats import percentiles
from tuner.workload.trace import TraceError

__all__ = ["agentic_stats", "read_agentic"]

Conversation = tuple[int, ...]  # each turn's prompt tokens


def read_agentic(path: str | Path) -> tuple[Conversation, ...]:
    """Each conversation's per-turn prompt tokens, checked: one error naming the file and the turn."""
    file = Path(path)
    try:
        stamp = file.stat().st_mtime_ns
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace ({exc.strerror})") from None
    return _read(str(file), stamp)


@lru_cache(maxsize=8)
def _read(path: str, _mtime: int) -> tuple[Conversation, ...]:
    try:
        data: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    conversations = data.get("conversations") if isinstance(data, dict) else None
    if not isinstance(conversations, list) or not conversations:
        raise TraceError(f"{path}: no 'conversations' (an agentic trace is {{\"conversations\": [[turn, ...], ...]}})")
    found = []
    for i, conversation in enumerate(conversations):
        if not isinstance(conversation, list):
            raise TraceError(f"{path}: conversations[{i}] is not a list of turns")
        turns = []
        for k, turn in enumerate(conversation):
            where = f"{path}: conversations[{i}][{k}]"
            if not isinstance(turn, dict):
                raise TraceError(f"{where}: not a JSON object")
            if not turn.get("messages"):
                continue
            tokens = turn.get("prompt_tokens")
            if tokens is None:
                raise TraceError(f"{where}: no 'prompt_tokens' (the turn's whole prompt in tokens)")
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
                raise TraceError(f"{where}: prompt_tokens {tokens!r} is not a positive whole number of tokens")
            turns.append(tokens)
        if turns:
            found.append(tuple(turns))
    if not found:
        raise TraceError(f"{path}: no conversation has a turn with messages")
    return tuple(found)


def agentic_stats(conversations: Sequence[Conversation], output: float) -> dict[str, Any]:
    """Conversations, turns per conversation, prompt tokens per turn, and the share of prompt
    tokens a cache of unlimited size could serve as this tool replays them: the previous turn's
    prompt, where the turn resends it (its prompt at least that and ``output`` tokens of answer;
    the answer is resent as text the tool wrote, so the engine prefills it again)."""
    prompts = [float(p) for c in conversations for p in c]
    turns = [float(len(c)) for c in conversations]
    reuse = 0.0
    for c in conversations:
        for before, now in itertools.pairwise(c):
            reuse += before if now >= before + output else 0.0
    return {
        "conversations": len(conversations),
        "requests": len(prompts),
        "turns": {"mean": sum(turns) / len(turns), **{f"p{p}": v for p, v in percentiles(turns, (50, 90, 99)).items()}},
        "prompt": {"mean": sum(prompts) / len(prompts), **{f"p{p}": v for p, v in percentiles(prompts, (50, 90, 99)).items()}},
        "prompt_tokens": int(sum(prompts)),
        "reusable_share": reuse / sum(prompts),
    }
