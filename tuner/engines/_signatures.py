"""Failure signatures: named patterns over a server log, plus the classifier that applies them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tuner.base.evidence import DISTANCE, Category, LogLine  # a grade's detail and the kinds: plain data, below the engines

__all__ = ["DISTANCE", "Category", "Signature", "SignatureMatch", "classify", "first_fatal", "raised_exception", "words_category"]


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

    _regexes: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regexes", tuple(re.compile(p) for p in self.patterns))

    def matches(self, line: str) -> bool:
        return any(rx.search(line) for rx in self._regexes)


@dataclass(frozen=True)
class SignatureMatch:
    signature: Signature
    lines: tuple[LogLine, ...]
    details: dict[str, Any]


def classify(signatures: Sequence[Signature], log_text: str, *, max_lines: int = 12) -> SignatureMatch | None:
    """The first signature (in priority order) that matches any line of ``log_text``.

    Engines reword their errors between releases. When no signature names the failure (none
    matches, or only a generic crash line such as "Scheduler hit an exception"), the failure
    is the exception the engine raised: the final line of its last traceback heads the
    evidence, its words give the category, and the numbers it prints (asked vs viable) the grade."""
    numbered = list(enumerate(log_text.splitlines(), start=1))
    for signature in signatures:
        hits = [LogLine(n, text) for n, text in numbered if signature.matches(text)]
        if hits:
            generic = signature.matches if signature.category == Category.CRASH else None
            if generic is not None and (raised := raised_exception(numbered, generic=generic)) is not None:
                return _from_exception(raised, hits, max_lines)
            return SignatureMatch(signature, tuple(hits[:max_lines]), _grade(signature, hits))
    raised = raised_exception(numbered)
    return _from_exception(raised, [], max_lines) if raised is not None else None


# The final line of a Python traceback: ``ValueError: ...`` (or a dotted class), possibly after a
# log prefix such as vLLM's "(EngineCore pid=12) " or a timestamp.
_RAISED = re.compile(r"(?:^|[\s)\]])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Failure))(?::\s*(.*))?$")
_TRACEBACK = "Traceback (most recent call last):"
_WORDS = (  # first match wins: the most specific words first
    (Category.CONTEXT_TOO_LONG, re.compile(r"context[ _-]?len|max[ _-]?(model|seq)[ _-]?len|too long|context length", re.I)),
    (Category.KV_CACHE, re.compile(r"kv[ _-]?cache|cache blocks|--mem-fraction-static|gpu[_ -]memory[_ -]utilization", re.I)),
    (Category.OUT_OF_MEMORY, re.compile(r"out of memory|\boom\b|not enough (gpu )?memory|cannot allocate|bad_alloc", re.I)),
    (Category.PORT_IN_USE, re.compile(r"address already in use", re.I)),
)
_ASKED = re.compile(r"(--[a-z][\w-]*)[= ]\(?([0-9][0-9.,]*)")
_ASKED_LENGTH = re.compile(r"((?:max[ _]\w+[ _])?(?:len|length|context_length))\s*\(([0-9][0-9,]*)\)", re.I)
_VIABLE = re.compile(r"(?:minimum viable|at least|above|at most|below|maximum|estimated)\D{0,40}?([0-9][0-9.,]*)", re.I)


def raised_exception(
    numbered: Sequence[tuple[int, str]], *, generic: Callable[[str], bool] = lambda text: False
) -> LogLine | None:
    """The exception an engine raised: the final line of the last traceback in a log whose words
    are not ``generic`` (vLLM's API server re-raises the engine core's root cause as "Engine core
    initialization failed. See root cause above."); without a traceback, the last line that reads
    like a raised exception. None when there is none."""
    finals: list[LogLine] = []
    loose: list[LogLine] = []
    in_traceback = False
    for number, text in numbered:
        if _TRACEBACK in text:
            in_traceback = True
            continue
        if text.startswith((" ", "\t")) or _RAISED.search(text.rstrip()) is None:
            continue
        line = LogLine(number, text.rstrip())
        (finals if in_traceback else loose).append(line)
        in_traceback = False
    for found in (finals, loose):
        useful = [line for line in found if not generic(line.text)]
        if useful:
            return useful[-1]
    return None


def words_category(text: str) -> str:
    """A failure category from an exception's words (memory, KV cache, context length, ...)."""
    return next((category for category, words in _WORDS if words.search(text)), Category.CRASH)


def printed_numbers(text: str) -> dict[str, Any]:
    """The numbers an exception prints about the config: the flag value asked for and the value
    the engine says would be viable (e.g. SGLang's "--mem-fraction-static=0.1 ... above 0.170")."""
    details: dict[str, Any] = {}
    if (asked := _ASKED.search(text) or _ASKED_LENGTH.search(text)) is not None:
        details["asked_flag"], details["asked"] = asked.group(1).strip(), _number(asked.group(2))
    rest = text[asked.end() :] if asked is not None else text
    if (viable := _VIABLE.search(rest)) is not None:
        details["viable"] = _number(viable.group(1))
    return {k: v for k, v in details.items() if v is not None}


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").rstrip("."))
    except ValueError:
        return None


def _from_exception(raised: LogLine, hits: list[LogLine], max_lines: int) -> SignatureMatch:
    text = raised.text
    category = words_category(text)
    signature = Signature(f"raised_{category}", category, (), fatal=False)
    details = {"exception": text.strip()[-500:], **printed_numbers(text)}
    return SignatureMatch(signature, (raised, *hits)[:max_lines], details)


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
