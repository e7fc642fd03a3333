"""Failure signatures: named patterns over a server log, plus the classifier that applies them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.evidence import LogLine

__all__ = ["Category", "Signature", "SignatureMatch", "classify", "first_fatal"]


class Category:
    """Coarse kinds of failure, shared by all engines."""

    OUT_OF_MEMORY = "out_of_memory"
    KV_CACHE = "kv_cache_does_not_fit"
    CONTEXT_TOO_LONG = "context_too_long"
    BAD_FLAG = "bad_flag"
    PORT_IN_USE = "port_in_use"
    CRASH = "crash"
    STARTUP_TIMEOUT = "startup_timeout"


@dataclass(frozen=True)
class Signature:
    """A named failure: any of ``patterns`` matching a log line identifies it.

    ``fatal``: a live server that prints such a line will not become ready, so
    waiting stops at once. ``grade`` optionally extracts numbers from the matched
    lines that say how far the config was from feasible (e.g. vLLM's estimated
    maximum model length).
    """

    name: str
    category: str
    patterns: tuple[str, ...]
    fatal: bool = True
    grade: Callable[[str], dict[str, Any]] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regexes", tuple(re.compile(p) for p in self.patterns))

    def matches(self, line: str) -> bool:
        return any(rx.search(line) for rx in self._regexes)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class SignatureMatch:
    signature: Signature
    lines: tuple[LogLine, ...]
    details: dict[str, Any]


def classify(
    signatures: Sequence[Signature], log_text: str, *, max_lines: int = 12
) -> SignatureMatch | None:
    """The first signature (in priority order) that matches any line of ``log_text``."""
    numbered = list(enumerate(log_text.splitlines(), start=1))
    for signature in signatures:
        hits = [LogLine(n, text) for n, text in numbered if signature.matches(text)]
        if hits:
            return SignatureMatch(signature, tuple(hits[:max_lines]), _grade(signature, hits))
    return None


def first_fatal(signatures: Iterable[Signature], line: str) -> Signature | None:
    """The fatal signature this single line matches, if any (used while a server starts)."""
    return next((s for s in signatures if s.fatal and s.matches(line)), None)


def _grade(signature: Signature, hits: list[LogLine]) -> dict[str, Any]:
    if signature.grade is None:
        return {}
    details: dict[str, Any] = {}
    for hit in hits:
        details.update(signature.grade(hit.text))
    return details
