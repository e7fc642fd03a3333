"""A workload as a space states it (``workload:``): what the probes that load a server send.

Kinds, composable as weighted classes (``classes:``; a single kind may be written inline):

- ``lengths``: one-turn requests whose prompt and output token counts are drawn from
  distributions (:class:`Dist`); every prompt is fresh (nothing served from the prefix cache);
- ``sessions``: multi-turn conversations: each turn resends the whole history (an optional
  ``system`` prompt shared by every session, then every earlier turn's user text and answer) plus
  ``user`` new tokens, and asks for ``output`` tokens; ``think`` seconds pass between a turn's
  end and the next one's send, so the engine's prefix cache does what it does in production;
- ``trace``: a JSONL trace in the Mooncake format (``timestamp`` ms, ``input_length``,
  ``output_length``, ``hash_ids``: one id per ``block`` tokens, the same id the same tokens);
  the open loop replays its timestamps scaled in time to the level's rate, the closed loop sends
  its requests in order;
- ``agentic``: SGLang's agentic-trace JSON (:mod:`tuner.workload.agentic`) read as sessions.

A trace's class keeps the file's sha256 and what it holds (``stats``) once the space is loaded, so
a study stores both with its space. ``describe()`` says each kind in a line.

Lengths are in the server's tokens: prompts are made of one-token words (tuner.probes._prompts).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["AgenticClass", "Dist", "LengthsClass", "Moments", "SessionsClass", "TraceClass", "WorkloadClass", "WorkloadSpec"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Moments(_Strict):
    """A distribution's own mean and standard deviation (lognormal: of the values, not their log)."""

    mean: float = Field(gt=0)
    sd: float = Field(ge=0)


class Dist(_Strict):
    """One number per draw. Exactly one kind: ``fixed`` (a number written alone means this),
    ``uniform: [low, high]`` (inclusive), ``normal`` or ``lognormal`` (``{mean, sd}``, redrawn
    until within ``min``/``max``), ``empirical`` (a list of values, or a file of one per line,
    drawn with equal weight). ``min``/``max`` bound every kind."""

    fixed: float | None = None
    uniform: tuple[float, float] | None = None
    normal: Moments | None = None
    lognormal: Moments | None = None
    empirical: list[float] | str | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _number(cls, v: Any) -> Any:
        return {"fixed": v} if isinstance(v, int | float) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _one_kind(self) -> Dist:
        kinds = [k for k in ("fixed", "uniform", "normal", "lognormal", "empirical") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of fixed, uniform, normal, lognormal, empirical (got {kinds or 'none'})")
        if self.uniform is not None and self.uniform[0] > self.uniform[1]:
            raise ValueError(f"uniform: low {self.uniform[0]:g} is above high {self.uniform[1]:g}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        if isinstance(self.empirical, list) and not self.empirical:
            raise ValueError("empirical: the list is empty")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("fixed", "uniform", "normal", "lognormal", "empirical") if getattr(self, k) is not None)

    def describe(self) -> str:
        """``512``, ``100-300``, ``normal 500 +- 50``, ``lognormal 2000 +- 1500``, ``empirical (3 values)``,
        with `` in [min, max]`` where bounded."""
        if self.fixed is not None:
            said = f"{self.fixed:g}"
        elif self.uniform is not None:
            said = f"{self.uniform[0]:g}-{self.uniform[1]:g}"
        elif self.normal is not None or self.lognormal is not None:
            m = self.normal or self.lognormal
            assert m is not None
            said = f"{self.kind} {m.mean:g} +- {m.sd:g}"
        else:
            said = (
                f"empirical ({len(self.empirical)} values)"
                if isinstance(self.empirical, list)
                else f"empirical from {Path(str(self.empirical)).name}"
            )
        if self.min is None and self.max is None:
            return said
        if self.max is None:
            return f"{said}, at least {self.min:g}"
        if self.min is None:
            return f"{said}, at most {self.max:g}"
        return f"{said} in [{self.min:g}, {self.max:g}]"

    def bounds(self) -> tuple[float, float]:
        """The least and the most a draw can be."""
        low, high = -math.inf, math.inf
        if self.fixed is not None:
            low = high = self.fixed
        elif self.uniform is not None:
            low, high = self.uniform
        elif isinstance(self.empirical, list):
            low, high = min(self.empirical), max(self.empirical)
        elif self.lognormal is not None:
            low = 0.0
        return max(low, self.min if self.min is not None else -math.inf), min(
            high, self.max if self.max is not None else math.inf
        )


def _positive(dist: Dist, what: str) -> Dist:
    """Token counts: every draw at least 1 (a normal or lognormal draw is rounded and kept >= 1);
    a fixed, uniform or listed value under 1, or a ``min`` under 1, is refused."""
    listed = dist.kind in ("fixed", "uniform") or isinstance(dist.empirical, list)
    if (listed and dist.bounds()[0] < 1) or (dist.min is not None and dist.min < 1):
        raise ValueError(f"{what}: a length must be at least 1 token (got {dist.bounds()[0]:g})")
    return dist


def _seconds(dist: Dist, what: str) -> Dist:
    """Times: a draw below 0 is refused unless a ``min`` bounds it."""
    if dist.bounds()[0] < 0 and dist.min is None:
        raise ValueError(f"{what}: seconds cannot be negative (give min: 0)")
    return dist


def _sha256(path: str) -> str:
    """A trace file's digest: a study resumed with another file is refused as a changed space is."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class LengthsClass(_Strict):
    """One-turn requests of drawn lengths, each prompt fresh."""

    kind: Literal["lengths"] = "lengths"
    weight: float = Field(1.0, gt=0)
    prompt: Dist
    output: Dist

    @model_validator(mode="after")
    def _positive(self) -> LengthsClass:
        _positive(self.prompt, "prompt")
        _positive(self.output, "output")
        return self

    def describe(self) -> str:
        return f"one-turn requests: prompts of {self.prompt.describe()} tokens (fresh), {self.output.describe()} out"


class SessionsClass(_Strict):
    """Multi-turn sessions; ``turns``, ``user`` (new tokens per turn), ``output`` and ``think``
    (seconds) are drawn per session (``turns``) or per turn (the rest); ``system`` tokens open
    every session's prompt, the same text in all of them."""

    kind: Literal["sessions"] = "sessions"
    weight: float = Field(1.0, gt=0)
    turns: Dist
    user: Dist
    output: Dist
    think: Dist = Field(default_factory=lambda: Dist(fixed=0.0))
    system: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _positive(self) -> SessionsClass:
        for name in ("turns", "user", "output"):
            _positive(getattr(self, name), name)
        _seconds(self.think, "think")
        return self

    def describe(self) -> str:
        system = f", a system prompt of {self.system:,} tokens shared by all" if self.system else ""
        return (
            f"sessions of {self.turns.describe()} turns resending their history: {self.user.describe()} new tokens "
            f"and {self.output.describe()} out per turn, {self.think.describe()} s between turns{system}"
        )


class TraceClass(_Strict):
    """A Mooncake-format JSONL trace (see the module). ``sha256`` is the file's, set when the space
    is loaded: a study resumed with another trace is refused as a changed space is."""

    kind: Literal["trace"] = "trace"
    weight: float = Field(1.0, gt=0)
    trace: str
    block: int = Field(512, ge=1)
    sha256: str | None = None
    stats: dict[str, float] | None = None  # requests, rate, prompt and output means, reusable share

    def fingerprinted(self) -> TraceClass:
        from tuner.workload.trace import read_trace, trace_stats

        found = trace_stats(read_trace(self.trace, self.block), self.block)
        stats = {k: float(found[k]) for k in ("requests", "span_s", "reusable_share") if found[k] is not None}
        stats |= {"prompt_mean": found["prompt"]["mean"], "output_mean": found["output"]["mean"]}
        return self.model_copy(update={"sha256": _sha256(self.trace), "stats": stats})

    def describe(self) -> str:
        said = f"Mooncake trace {Path(self.trace).name}"
        if s := self.stats:
            said += (
                f" ({s['requests']:,.0f} requests over {s.get('span_s', 0):,.0f} s, prompts {s['prompt_mean']:,.0f} and "
                f"outputs {s['output_mean']:,.0f} tokens on average, {s['reusable_share']:.0%} of prompt tokens reusable)"
            )
        return said + (f", sha256 {self.sha256[:12]}" if self.sha256 else "")


class AgenticClass(_Strict):
    """SGLang's agentic-trace JSON (:mod:`tuner.workload.agentic`) read as sessions: each
    conversation's turns at the trace's prompt lengths, answers of ``output`` tokens (SGLang's
    bench asks 220 where the trace says nothing), ``think`` seconds between a turn's end and the
    next, at most ``max_turns`` turns. ``sha256`` as a trace's."""

    kind: Literal["agentic"] = "agentic"
    weight: float = Field(1.0, gt=0)
    agentic: str
    output: Dist = Field(default_factory=lambda: Dist(fixed=220))
    think: Dist = Field(default_factory=lambda: Dist(fixed=0.0))
    max_turns: int | None = Field(None, ge=1)
    sha256: str | None = None
    stats: dict[str, float] | None = None  # conversations, turns, prompt mean, reusable share, system prompts

    @model_validator(mode="after")
    def _positive(self) -> AgenticClass:
        _positive(self.output, "output")
        _seconds(self.think, "think")
        return self

    def fingerprinted(self) -> AgenticClass:
        from tuner.workload.agentic import agentic_stats, read_agentic

        low, high = self.output.bounds()
        found = agentic_stats(read_agentic(self.agentic), high if math.isfinite(high) else low)
        stats = {k: float(found[k]) for k in ("conversations", "requests", "reusable_share", "systems")} | {
            "prompt_mean": found["prompt"]["mean"]
        }
        return self.model_copy(update={"sha256": _sha256(self.agentic), "stats": stats})

    def describe(self) -> str:
        said = f"agentic trace {Path(self.agentic).name} as sessions"
        if s := self.stats:
            said += (
                f" ({s['conversations']:,.0f} conversations, {s['requests']:,.0f} turns, prompts {s['prompt_mean']:,.0f} "
                f"tokens on average, {s['reusable_share']:.0%} resent from the turn before"
                + (f" or a system prompt sent before, {s['systems']:,.0f} of them" if s.get("systems") else "")
                + ")"
            )
        said += f", {self.output.describe()} out per turn"
        return said + (f", sha256 {self.sha256[:12]}" if self.sha256 else "")


WorkloadClass = Annotated[LengthsClass | SessionsClass | TraceClass | AgenticClass, Field(discriminator="kind")]
_KIND_OF = {"prompt": "lengths", "turns": "sessions", "trace": "trace", "agentic": "agentic"}


class WorkloadSpec(_Strict):
    """The space's ``workload:``: weighted classes (or one written inline), drawn from ``seed``."""

    name: str | None = None
    description: str | None = None
    seed: int = 0
    classes: list[WorkloadClass] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _inline(cls, v: Any) -> Any:
        """``workload: {trace: t.jsonl}`` or ``{prompt: ..., output: ...}`` or ``{turns: ...}``:
        one class, its kind told by its keys."""
        if not isinstance(v, dict) or "classes" in v:
            return v
        own = {k: v[k] for k in ("name", "description", "seed") if k in v}
        rest = {k: x for k, x in v.items() if k not in own}
        kind = next((_KIND_OF[k] for k in _KIND_OF if k in rest), rest.get("kind"))
        return {**own, "classes": [{"kind": kind, **rest} if kind else rest]}

    def describe(self) -> list[str]:
        """A line per class (its share where there are several), led by the workload's name."""
        total = sum(c.weight for c in self.classes)
        lines = [f"{c.weight / total:.0%}: {c.describe()}" if len(self.classes) > 1 else c.describe() for c in self.classes]
        head = f"workload {self.name!r}" if self.name else "workload"
        return [f"{head}: {lines[0]}"] if len(lines) == 1 else [f"{head}:", *(f"  {line}" for line in lines)]

    @property
    def traces(self) -> list[TraceClass]:
        return [c for c in self.classes if isinstance(c, TraceClass)]

    @property
    def replays(self) -> bool:
        """A single trace: the open loop replays its timestamps (else Poisson arrivals)."""
        return len(self.classes) == 1 and isinstance(self.classes[0], TraceClass)
