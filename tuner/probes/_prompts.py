"""Prompts no server has seen, of exactly the asked token length.

Engines cache prompt prefixes (vLLM and SGLang by default, llama.cpp per slot), so a workload
that repeats prompts measures decode with a cached prefill, not what users' traffic costs.
Every prompt here is a fresh random sequence of words that are one token each in the server's
own tokenizer (checked with ``/tokenize``), so its length is exact by construction: ``words =
asked - overhead``, where ``overhead`` (BOS, chat template) is read once from the server's
``usage.prompt_tokens`` of a calibration request. A space may ask for a shared prefix on purpose
(``prefix_tokens``): then that many leading tokens are the same in every request.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tuner.base.exceptions import ProbeError
from tuner.probes._tokens import _WORDS, Tokenizer
from tuner.workload import Segment, Session, Turn, Workload, poisson

__all__ = ["FixedSource", "PromptMaker", "Source", "Vocabulary", "WorkloadSource", "one_token_words"]

_CANDIDATES = (
    *_WORDS,
    *"""the and of to in is it you that he was for on are as with his they at be this have from or one
    had by word but not what all were we when your can said there use an each which she do how their
    if will up other about out many then them these so some her would make like him into time has
    look two more write go see number no way could people my than first water been call who oil its
    now find long down day did get come made may part over new sound take only little work know place
    year live me back give most very""".split(),
)
MIN_WORDS = 16


@dataclass(frozen=True)
class Vocabulary:
    """Words of one token each after a space (``words``), and those also one token at the very
    start of a text (``first``: a word at the start has no space before it and often splits)."""

    words: Sequence[str]
    first: Sequence[str]


_KNOWN: dict[tuple[str, tuple[str, ...], tuple[int, ...]], Vocabulary] = {}


async def one_token_words(tokenizer: Tokenizer, candidates: list[str] | None = None) -> Vocabulary:
    """The candidates that cost exactly one token each in the server's own tokenizer.

    Two requests per candidate (~290, 0.4 CPU-seconds of this client's); a process that probes
    many servers of one model (a study's trials, a Ray worker's) asks them once: the next server
    whose ids for all the candidates in one text are the same gets the same answer for one request."""
    unique = tuple(dict.fromkeys(candidates or _CANDIDATES))
    ids = await tokenizer.ids(" ".join(unique))
    key = (tokenizer.model, unique, ids) if ids is not None else None
    if key is not None and (known := _KNOWN.get(key)) is not None:
        return known
    words, alone = [], {}
    for word in unique:
        short = await tokenizer.count(" ".join([word] * 8))
        long = await tokenizer.count(" ".join([word] * 16))
        if long - short == 8:
            words.append(word)
            alone[word] = short - 7  # special tokens + the cost of the word at the start
    if len(words) < MIN_WORDS:
        raise ProbeError(f"only {len(words)} of the candidate words are one token each in this tokenizer (need {MIN_WORDS})")
    least = min(alone.values())  # special tokens + 1: the cheapest start is one token
    first = [w for w in words if alone[w] == least]
    vocabulary = Vocabulary(tuple(words), tuple(first))  # shared by the probes that reuse it: read-only
    if key is not None:
        _KNOWN[key] = vocabulary
    return vocabulary


class PromptMaker:
    """``make(i)``: the i-th prompt, ``asked`` tokens long once ``overhead`` is known."""

    def __init__(self, vocabulary: Vocabulary, asked: int, *, seed: int = 0, prefix_tokens: int = 0) -> None:
        if not 0 <= prefix_tokens < asked:
            raise ValueError(f"prefix_tokens ({prefix_tokens}) must be in [0, {asked})")
        self.words = vocabulary.words
        self.first = vocabulary.first or vocabulary.words
        self.asked = asked
        self.seed = seed
        self.overhead = 0
        rng = random.Random(f"{seed}-prefix")
        self._prefix = rng.choices(self.first, k=1) + rng.choices(self.words, k=prefix_tokens - 1) if prefix_tokens else []

    @property
    def sent_words(self) -> int:
        """Words in every prompt: the shared prefix and the fresh body."""
        return len(self._prefix) + self.body_words

    @property
    def body_words(self) -> int:
        return max(1, self.asked - self.overhead - len(self._prefix))

    def make(self, i: int) -> str:
        rng = random.Random(f"{self.seed}-{i}")
        body = rng.choices(self.words, k=self.body_words)
        if not self._prefix:
            body[0] = rng.choice(self.first)
        return " ".join(self._prefix + body)

    def calibrate(self, sent_words: int, server_prompt_tokens: int) -> None:
        """The server counted ``server_prompt_tokens`` for a prompt of ``sent_words`` words."""
        self.overhead = max(0, server_prompt_tokens - sent_words)
        if self.overhead >= self.asked:
            raise ProbeError(f"the server adds {self.overhead} tokens to every prompt: {self.asked} cannot be sent exactly")


class Source(Protocol):
    """What a load level sends: session ``i`` (its turns: segments, output, think time) and the
    prompt text of its turn ``k``; picklable (the open loop's senders draw and make them)."""

    def session(self, i: int) -> Session: ...

    def text(self, session: Session, k: int) -> str: ...

    def arrivals(self, rate: float, seed: int, first: int = 0) -> Iterator[float]: ...


class FixedSource:
    """The probes' own shape: session ``i`` is one request, ``make(i)`` its prompt (fresh, or a
    dataset's), ``output`` tokens asked (picklable: the open loop's senders make them)."""

    def __init__(self, make: Callable[[int], str], prompt_tokens: int | None, output: int) -> None:
        self.make, self.prompt_tokens, self.output = make, prompt_tokens, output

    def session(self, i: int) -> Session:
        return Session(i, "fixed", (Turn((Segment(f"r{i}", self.prompt_tokens or 0),), self.output),))

    def text(self, session: Session, k: int) -> str:
        return self.make(session.index)

    def arrivals(self, rate: float, seed: int, first: int = 0) -> Iterator[float]:
        return poisson(rate, seed)


class WorkloadSource:
    """A space's workload (:class:`~tuner.workload.Workload`): session ``i``'s turns, each turn's
    prompt made of its segments' words (one token each, ``overhead`` tokens of the server's own
    taken off the last segment so the server counts the turn's length exactly)."""

    CACHE = 4096  # segments' words kept (a session's history is resent every turn)

    def __init__(self, workload: Workload, vocabulary: Vocabulary, overhead: int = 0) -> None:
        self.workload = workload
        self.words, self.overhead = tuple(vocabulary.words), overhead
        first = set(vocabulary.first or vocabulary.words)
        starts = [w for w in self.words if w in first] or list(self.words)
        self._start = {w: (w if w in first else starts[i % len(starts)]) for i, w in enumerate(self.words)}
        self._made: OrderedDict[str, list[str]] = OrderedDict()

    def __getstate__(self) -> dict[str, object]:
        return {"workload": self.workload, "words": self.words, "overhead": self.overhead, "start": self._start}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.workload, self.words, self.overhead, self._start = (
            state["workload"],
            state["words"],
            state["overhead"],
            state["start"],
        )
        self._made = OrderedDict()

    def session(self, i: int) -> Session:
        return self.workload.session(i)

    def arrivals(self, rate: float, seed: int, first: int = 0) -> Iterator[float]:
        return self.workload.arrivals(rate, seed, first)

    def text(self, session: Session, k: int) -> str:
        segments = list(session.turns[k].segments)
        cut = self.overhead
        while cut and segments:  # the server's own tokens (BOS, a chat template) come off the end
            last = segments.pop()
            if last.tokens > cut:
                segments.append(Segment(last.id, last.tokens - cut))
                break
            cut -= last.tokens
        words = [w for s in segments for w in self._words(s)] or [self.words[0]]
        words[0] = self._start[words[0]]
        return " ".join(words)

    def _words(self, segment: Segment) -> list[str]:
        """The segment's words: the first ``tokens`` of its id's own stream (a prefix of a longer use)."""
        have = self._made.get(segment.id)
        if have is None or len(have) < segment.tokens:
            have = random.Random(f"segment-{segment.id}").choices(self.words, k=max(segment.tokens, len(have or ())))
            self._made[segment.id] = have
        self._made.move_to_end(segment.id)
        while len(self._made) > self.CACHE:
            self._made.popitem(last=False)
        return have[: segment.tokens]
