"""SGLang's agentic-trace JSON read as sessions (its ``bench_serving --dataset-name agentic_trace``).

The file is ``{"conversations": [[turn, turn, ...], ...]}``; a turn is ``{"messages": [...],
"prompt_tokens": N}``: the new messages of that turn and the whole prompt's tokens by the trace's
tokenizer (the history included: an agent resends it every turn). The messages' text is not
replayed (prompts are made of one-token words, so lengths stay exact by the server's count); the
counts are: a turn's new tokens are its prompt less the history before it (the previous prompt and
the answer to it). A turn whose prompt is shorter than that history (the agent cut or compacted it)
starts the history again. SGLang's reader ignores the turns without messages; so does this one.

One part of the text is read: the system messages that open a conversation's first turn. An agent
sends the same system prompt in every conversation (its instructions and tools, often thousands of
tokens), so an engine serves it from its prefix cache across conversations, as it does when SGLang's
bench replays the text. Conversations whose opening system messages are equal share one system
segment here. The trace counts tokens per prompt only, so the segment's tokens are estimated: the
first prompt's tokens in the share of the first turn's characters that the system messages hold
(the chat template's own tokens fall to the other messages), from the first conversation that
sends it, kept for every other.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tuner.base.stats import percentiles
from tuner.workload.trace import TraceError

__all__ = ["Conversation", "agentic_stats", "read_agentic"]


@dataclass(frozen=True)
class Conversation:
    """One conversation: each turn's prompt tokens, and the system prompt it opens with (a digest of
    its text, the same in every conversation that sends it, and its tokens), if any."""

    prompts: tuple[int, ...]
    system: str | None = None
    system_tokens: int = 0

    def kept(self, prompt: float, history: float) -> float:
        """The tokens of a turn's history (``history`` tokens sent before it) that its ``prompt``
        resends: all of them where the prompt is longer; else (the agent cut or compacted its
        history) the system prompt, where the prompt is longer than that; else none. The one rule
        the replay (:mod:`tuner.workload.draw`) and :func:`agentic_stats` follow."""
        if prompt > history:
            return history
        return float(self.system_tokens) if self.system and prompt > self.system_tokens else 0.0


def read_agentic(path: str | Path) -> tuple[Conversation, ...]:
    """Each conversation's per-turn prompt tokens and system prompt, checked: one error naming the
    file and the turn."""
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
    systems: dict[str, int] = {}  # a system prompt's digest: its tokens, from the first conversation that sends it
    for i, conversation in enumerate(conversations):
        if not isinstance(conversation, list):
            raise TraceError(f"{path}: conversations[{i}] is not a list of turns")
        turns: list[int] = []
        opening: list[Any] = []
        for k, turn in enumerate(conversation):
            where = f"{path}: conversations[{i}][{k}]"
            if not isinstance(turn, dict):
                raise TraceError(f"{where}: not a JSON object")
            messages = turn.get("messages")
            if not messages:
                continue
            if not isinstance(messages, list):
                raise TraceError(f"{where}: 'messages' is not a list")
            tokens = turn.get("prompt_tokens")
            if tokens is None:
                raise TraceError(f"{where}: no 'prompt_tokens' (the turn's whole prompt in tokens)")
            if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
                raise TraceError(f"{where}: prompt_tokens {tokens!r} is not a positive whole number of tokens")
            if not turns:
                opening = messages
            turns.append(tokens)
        if turns:
            found.append(_with_system(tuple(turns), opening, systems))
    if not found:
        raise TraceError(f"{path}: no conversation has a turn with messages")
    return tuple(found)


def _with_system(prompts: tuple[int, ...], opening: list[Any], systems: dict[str, int]) -> Conversation:
    """The conversation with the system messages its first turn opens with, where they leave at
    least one token of the first prompt to the rest."""
    texts = [_text(m) for m in opening]
    lead = len(list(itertools.takewhile(lambda m: isinstance(m, dict) and m.get("role") == "system", opening)))
    system, everything = sum(len(t) for t in texts[:lead]), sum(len(t) for t in texts)
    if not system:
        return Conversation(prompts)
    digest = hashlib.sha256("\x00".join(texts[:lead]).encode()).hexdigest()[:16]
    tokens = systems.setdefault(digest, int(prompts[0] * system / everything))
    if not 1 <= tokens < prompts[0]:
        return Conversation(prompts)
    return Conversation(prompts, digest, tokens)


def _text(message: Any) -> str:
    """A message's text: its content as a string, or its parts' text (OpenAI's content parts), or
    the content as JSON (tool calls and anything else)."""
    content = message.get("content") if isinstance(message, dict) else message
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return json.dumps(content, sort_keys=True) if content is not None else ""


def agentic_stats(conversations: Sequence[Conversation], output: float) -> dict[str, Any]:
    """Conversations, turns per conversation, prompt tokens per turn, the system prompts they open
    with, and the share of prompt tokens a cache of unlimited size could serve as this tool replays
    them: the previous turn's prompt, where the turn resends it (its prompt at least that and
    ``output`` tokens of answer; the answer is resent as text the tool wrote, so the engine prefills
    it again), and a system prompt an earlier prompt sent."""
    prompts = [float(p) for c in conversations for p in c.prompts]
    turns = [float(len(c.prompts)) for c in conversations]
    reuse = 0.0
    seen: set[str] = set()
    for c in conversations:
        reuse += c.system_tokens if c.system in seen else 0.0
        if c.system:
            seen.add(c.system)
        for before, now in itertools.pairwise(c.prompts):
            reuse += min(c.kept(now, before + output), before)  # of the history, the answer is prefilled again
    opening = {c.system: c.system_tokens for c in conversations if c.system}
    return {
        "conversations": len(conversations),
        "requests": len(prompts),
        "turns": {"mean": sum(turns) / len(turns), **{f"p{p}": v for p, v in percentiles(turns, (50, 90, 99)).items()}},
        "prompt": {"mean": sum(prompts) / len(prompts), **{f"p{p}": v for p, v in percentiles(prompts, (50, 90, 99)).items()}},
        "prompt_tokens": int(sum(prompts)),
        "reusable_share": reuse / sum(prompts),
        "systems": len(opening),
        "with_system": sum(1 for c in conversations if c.system),
        "system_tokens": sum(opening.values()) / len(opening) if opening else 0.0,
    }
