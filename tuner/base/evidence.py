"""Evidence: the facts behind a failed or suspicious server, kept as plain data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CATEGORIES", "DISTANCE", "Category", "Evidence", "LogLine"]


class Category:
    """Coarse kinds of failure, shared by all engines (their signatures name one; re-exported by
    tuner.engines)."""

    OUT_OF_MEMORY = "out_of_memory"
    KV_CACHE = "kv_cache_does_not_fit"
    CONTEXT_TOO_LONG = "context_too_long"
    BAD_FLAG = "bad_flag"
    PORT_IN_USE = "port_in_use"
    CRASH = "crash"
    STARTUP_TIMEOUT = "startup_timeout"


CATEGORIES = frozenset(v for k, v in vars(Category).items() if k.isupper())
DISTANCE = "distance_to_feasible"  # a failure's detail: what was asked over what the engine says fits, minus one


@dataclass(frozen=True)
class LogLine:
    """One line of a server log, 1-based line number."""

    number: int
    text: str


@dataclass(frozen=True)
class Evidence:
    """What was launched, how it ended and which log lines say why.

    ``signature`` is the name of the failure signature that matched (e.g. ``"kv_cache_oom"``),
    or ``None`` when nothing matched; ``category`` its coarse kind (a
    :class:`tuner.engines.Category` value: ``out_of_memory``, ``port_in_use``, ...), where a
    signature matched; ``reason`` a sentence where the tuner itself decided (a pre-screen's
    prediction, a probe's error).
    """

    argv: tuple[str, ...]
    elapsed_s: float
    signature: str | None = None
    category: str | None = None
    reason: str = ""
    returncode: int | None = None
    signal: str | None = None
    lines: tuple[LogLine, ...] = ()
    log_path: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        data["lines"] = [asdict(line) for line in self.lines]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evidence:
        data = dict(data)
        if "summary" in data:  # written before category and reason were apart: one field held either
            old = data.pop("summary") or ""
            if old in CATEGORIES:
                data.setdefault("category", old)
            elif old and old != data.get("signature"):
                data.setdefault("reason", old)
        return cls(
            **{
                **data,
                "argv": tuple(data["argv"]),
                "lines": tuple(LogLine(**line) for line in data.get("lines", ())),
            }
        )

    def describe(self) -> str:
        """One line for tables and logs."""
        how = f"exit {self.returncode}" if self.returncode is not None else (self.signal or "running")
        head = self.signature or "unclassified"
        line = self.details.get("headline") or (self.lines[0].text if self.lines else "")
        first = f": {line.strip()[:160]}" if line else ""
        return f"{head} ({how}, {self.elapsed_s:.1f}s){first}"
