"""A workload drawn: session ``i`` and the arrival times of sessions, the same in every process.

A request is one :class:`Turn` of a :class:`Session`; its prompt is a list of :class:`Segment`\\ s
(an id and a token count): the same id is the same text wherever it appears (a shorter count, a
prefix of it), so what requests share, and only that, an engine's prefix cache can serve. Ids:
``r<i>`` a fresh prompt (never seen again), ``t<class>.<pass>.<hash id>`` a trace block (each
pass over a trace its own ids: a second pass reuses what the trace reuses, not the first pass),
``s<i>.u<k>``/``s<i>.a<k>`` session ``i``'s turn-``k`` user text and answer, ``sys<class>`` a
sessions class's system prompt, ``sys<class>.<digest>`` an agentic trace's system prompt (every
conversation that opens with the same text). A session resends its answers as text the tool wrote (the
engine's own reply is not read back): the cache serves the history up to the last turn's prompt,
the last answer's tokens are prefilled again, as a client that edits the reply would make it.

Everything is drawn from ``seed`` and ``i`` alone (``random.Random`` of a string), so the parent
and every sender process draw the same session ``i`` without talking to each other.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.workload.agentic import Conversation, read_agentic
from tuner.workload.spec import AgenticClass, Dist, LengthsClass, SessionsClass, TraceClass, WorkloadSpec
from tuner.workload.trace import TraceRow, read_trace

__all__ = ["MAX_TURNS", "Segment", "Session", "Turn", "Workload", "draw", "fixed", "poisson"]

MAX_TURNS = 4096  # a session's turns are capped here (a record's key is session * MAX_TURNS + turn)
REDRAWS = 1000  # a bounded normal/lognormal is redrawn this often at most, then clamped


@dataclass(frozen=True)
class Segment:
    id: str
    tokens: int


@dataclass(frozen=True)
class Turn:
    """One request: its prompt's segments, the output it asks for, the think time before it."""

    segments: tuple[Segment, ...]
    output: int
    think_s: float = 0.0

    @property
    def prompt_tokens(self) -> int:
        return sum(s.tokens for s in self.segments)


@dataclass(frozen=True)
class Session:
    index: int
    kind: str  # the class's kind: lengths, sessions, trace
    turns: tuple[Turn, ...]
    at_s: float | None = None  # a trace row's own time (seconds from the trace's start)


def poisson(rate: float, seed: int) -> Iterator[float]:
    """Poisson arrivals of ``rate`` per second: seconds from a level's start, fixed by ``seed``."""
    rng = random.Random(seed)
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t


def draw(dist: Dist, rng: random.Random) -> float:
    """One draw of ``dist`` within its ``min``/``max``."""
    low = dist.min if dist.min is not None else -math.inf
    high = dist.max if dist.max is not None else math.inf
    if dist.fixed is not None:
        value = dist.fixed
    elif dist.uniform is not None:
        a, b = dist.uniform
        value = rng.randint(int(a), int(b)) if float(a).is_integer() and float(b).is_integer() else rng.uniform(a, b)
    elif dist.empirical is not None:
        value = rng.choice(_values(dist.empirical))
    else:
        value = _bounded(dist, rng, low, high)
    return min(max(value, low), high)


def _bounded(dist: Dist, rng: random.Random, low: float, high: float) -> float:
    value = 0.0
    for _ in range(REDRAWS):
        if dist.normal is not None:
            value = rng.gauss(dist.normal.mean, dist.normal.sd)
        else:
            assert dist.lognormal is not None
            m, s = dist.lognormal.mean, dist.lognormal.sd
            sigma2 = math.log(1 + (s / m) ** 2)
            value = rng.lognormvariate(math.log(m) - sigma2 / 2, math.sqrt(sigma2))
        if low <= value <= high:
            break
    return value


_EMPIRICAL: dict[str, tuple[float, ...]] = {}


def _values(source: list[float] | str) -> Sequence[float]:
    if isinstance(source, list):
        return source
    if source not in _EMPIRICAL:
        _EMPIRICAL[source] = tuple(float(x) for x in Path(source).read_text().split())
    return _EMPIRICAL[source]


def _tokens(dist: Dist, rng: random.Random) -> int:
    return max(1, round(draw(dist, rng)))


def fixed(prompt_tokens: int, output_tokens: int) -> WorkloadSpec:
    """The probes' own shape as a workload: every prompt fresh and ``prompt_tokens`` long."""
    return WorkloadSpec(classes=[LengthsClass(prompt=Dist(fixed=prompt_tokens), output=Dist(fixed=output_tokens))])


class Workload:
    """Session ``i`` (:meth:`session`) and session arrivals (:meth:`arrivals`) of a spec."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self._rows = {c: read_trace(k.trace, k.block) for c, k in enumerate(spec.classes) if isinstance(k, TraceClass)}
        self._agentic = {c: read_agentic(k.agentic) for c, k in enumerate(spec.classes) if isinstance(k, AgenticClass)}
        total = sum(c.weight for c in spec.classes)
        self._cumulative = list(itertools.accumulate(c.weight / total for c in spec.classes))
        self._chosen: list[int] = []  # the class of session 0, 1, ... so far
        self._ordinal: list[int] = []  # session i is the n-th of its class
        self._counts = [0] * len(spec.classes)

    def __getstate__(self) -> dict[str, object]:  # to a sender process: the spec; traces are read there
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, object]) -> None:
        spec = state["spec"]
        assert isinstance(spec, WorkloadSpec)
        self.__init__(spec)  # type: ignore[misc]

    def _class_of(self, i: int) -> tuple[int, int]:
        while len(self._chosen) <= i:
            n = len(self._chosen)
            u = random.Random(f"{self.spec.seed}-class-{n}").random()
            c = min(bisect.bisect_right(self._cumulative, u), len(self._cumulative) - 1) if len(self._cumulative) > 1 else 0
            self._chosen.append(c)
            self._ordinal.append(self._counts[c])
            self._counts[c] += 1
        return self._chosen[i], self._ordinal[i]

    def session(self, i: int) -> Session:
        c, n = self._class_of(i)
        kind = self.spec.classes[c]
        rng = random.Random(f"{self.spec.seed}-session-{i}")
        if isinstance(kind, LengthsClass):
            turn = Turn((Segment(f"r{i}", _tokens(kind.prompt, rng)),), _tokens(kind.output, rng))
            return Session(i, "lengths", (turn,))
        if isinstance(kind, TraceClass):
            return self._trace_session(i, c, n, kind)
        if isinstance(kind, AgenticClass):
            conversations = self._agentic[c]
            return _agentic(i, c, kind, conversations[n % len(conversations)], rng)
        return _conversation(i, c, kind, rng)

    def _trace_session(self, i: int, c: int, n: int, kind: TraceClass) -> Session:
        rows = self._rows[c]
        row = rows[n % len(rows)]
        passed = n // len(rows)
        segments = [Segment(f"t{c}.{passed}.{h}", kind.block) for h in row.hash_ids]
        covered = kind.block * len(segments)
        if covered > row.input_length:  # the last block is partial
            segments[-1] = Segment(segments[-1].id, kind.block - (covered - row.input_length))
        elif covered < row.input_length:  # tokens with no id: fresh
            segments.append(Segment(f"r{i}", row.input_length - covered))
        at = (row.timestamp_ms - rows[0].timestamp_ms) / 1000
        return Session(i, "trace", (Turn(tuple(segments), row.output_length),), at)

    def arrivals(self, rate: float, seed: int, first: int = 0) -> Iterator[float]:
        """Start times of sessions ``first``, ``first + 1``, ... (seconds from a level's start) at
        ``rate`` sessions/s: a workload of one trace replays its rows' own times from row ``first``
        on, scaled in time to that rate (the trace's pace between requests kept; a pass over the
        trace follows the last one a mean gap later), anything else arrives as a Poisson process
        fixed by ``seed``."""
        if not self.spec.replays:
            yield from poisson(rate, seed)
            return
        rows = self._rows[0]
        span = (rows[-1].timestamp_ms - rows[0].timestamp_ms) / 1000
        own = (len(rows) - 1) / span if len(rows) > 1 and span > 0 else rate
        period = span + 1.0 / own  # one pass, then a mean gap to the next
        scale = own / rate  # trace seconds to level seconds

        def at(n: int) -> float:
            return (rows[n % len(rows)].timestamp_ms - rows[0].timestamp_ms) / 1000 + (n // len(rows)) * period

        origin = at(first)
        for n in itertools.count(first):
            yield (at(n) - origin) * scale

    def trace_rows(self, c: int = 0) -> tuple[TraceRow, ...]:
        return self._rows[c]


def _conversation(i: int, c: int, kind: SessionsClass, rng: random.Random) -> Session:
    turns = min(MAX_TURNS, _tokens(kind.turns, rng))
    history: list[Segment] = [Segment(f"sys{c}", kind.system)] if kind.system else []
    made = []
    for k in range(turns):
        user = Segment(f"s{i}.u{k}", _tokens(kind.user, rng))
        output = _tokens(kind.output, rng)
        think = max(0.0, draw(kind.think, rng)) if k else 0.0
        made.append(Turn((*history, user), output, think))
        history += [user, Segment(f"s{i}.a{k}", output)]
    return Session(i, "sessions", tuple(made))


def _agentic(i: int, c: int, kind: AgenticClass, conversation: Conversation, rng: random.Random) -> Session:
    """A conversation of an agentic trace: each turn's prompt the trace's length, its new tokens
    what the history before it does not cover; a prompt shorter than that history starts it again,
    from the conversation's system prompt where the prompt is longer than that."""
    system = [Segment(f"sys{c}.{conversation.system}", conversation.system_tokens)] if conversation.system else []
    history: list[Segment] = list(system)
    made = []
    for k, prompt in enumerate(conversation.prompts[: min(MAX_TURNS, kind.max_turns or MAX_TURNS)]):
        sent = sum(s.tokens for s in history)
        if (kept := conversation.kept(prompt, sent)) < sent:  # the agent cut its history
            history = list(system) if kept else []
        new = prompt - sum(s.tokens for s in history)
        user = Segment(f"s{i}.u{k}", new)
        output = _tokens(kind.output, rng)
        think = max(0.0, draw(kind.think, rng)) if k else 0.0
        made.append(Turn((*history, user), output, think))
        history += [user, Segment(f"s{i}.a{k}", output)]
    return Session(i, "sessions", tuple(made))
