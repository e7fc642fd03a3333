"""Pre-screen: skip a config only when the study's own evidence says it cannot start.

Every launch of a config that cannot start costs a full startup (minutes on GPUs), but a config
skipped wrongly is worse: the sampler is told a region is infeasible and never goes back. So the
screen never extrapolates. Configs are compared through their engine's memory model
(:class:`tuner.engines.memory.MemoryModel`, declared by each adapter) and a config is skipped only when:

1. **dominated by a failure**: a launched config failed for lack of memory (a ``monotone``
   signature) and this one has no more room on every room axis, at least the need on every need
   axis, and every knob the model does not know equal; or
2. **named by the engine**: a failed config's engine named the longest length its memory holds
   (vLLM's "estimated maximum model length"), and this config, no roomier and no less needy on the
   other axes, asks for more; or a config that started reported its KV pool and this one, no
   roomier, asks for a length above that pool where the engine needs it to fit (vLLM); or an
   earlier failure named the model's own longest context (SGLang's derived length) and this
   config asks for more.

A config with at least the room and at most the need of one that started is never skipped. A
failure contradicted by a later start (a config that needed at least as much and started) is no
evidence any more: the configs skipped on its word are re-proposed (:meth:`Screen.contradicted`).
A skipped config becomes a PRUNED trial whose evidence is the prediction and the trial it came
from (never silent).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import TrialState

from tuner.engines.memory import MemoryModel
from tuner.trials import TrialRecord

__all__ = ["Prediction", "Screen", "describe_screen", "screen_for"]


@dataclass(frozen=True)
class Prediction:
    """A predicted failure, with the numbers behind it (``from_trial``: the evidence)."""

    signature: str
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Point:
    number: int
    started: bool
    signature: str | None
    values: Mapping[str, Any]
    room: tuple[float | None, ...]
    needs: tuple[tuple[str, float | None], ...]  # (axis name, value)
    others: tuple[tuple[str, Any], ...]
    details: Mapping[str, Any]
    kv_tokens: float | None


class Screen:
    """Fitted to a study's launched trials, predicts which configs cannot start.

    ``predict`` takes everything a launch would set (fixed flags, params, tied flags); ``fit``
    takes the study's trials and ``expand``, which completes a trial's params the same way.
    Without a memory model it predicts nothing (every config is launched)."""

    def __init__(self, model: MemoryModel | None = None) -> None:
        self.model = model
        self.points: list[_Point] = []
        self._contradicted: dict[int, int] = {}

    def fit(self, trials: Sequence[TrialRecord], expand: Callable[[dict[str, Any]], dict[str, Any]] = dict) -> None:
        self.points, self._contradicted = [], {}
        if self.model is None:
            return
        for i, t in enumerate(trials):
            if not t.finished:
                continue
            number = t.number if t.number >= 0 else i  # a trial made outside a study has no number: its position
            self.points.append(
                self._point(expand(dict(t.params)), number, t.state == TrialState.COMPLETE, t.signature, t.details, t.kv_tokens)
            )
        started = [p for p in self.points if p.started]
        for f in self._failures():
            if (s := next((s for s in started if _needier(s, f)), None)) is not None:
                self._contradicted[f.number] = s.number

    def _point(
        self,
        values: Mapping[str, Any],
        number: int = -1,
        started: bool = False,
        signature: str | None = None,
        details: Mapping[str, Any] | None = None,
        kv_tokens: float | None = None,
    ) -> _Point:
        assert self.model is not None
        others = tuple(sorted((k, str(v)) for k, v in values.items() if k not in self.model.modelled))
        return _Point(
            number,
            started,
            signature,
            values,
            tuple(axis.value(values) for axis in self.model.room),
            tuple((axis.name, axis.value(values)) for axis in self.model.needs),
            others,
            details or {},
            float(kv_tokens) if kv_tokens else None,
        )

    def _failures(self) -> list[_Point]:
        assert self.model is not None
        return [p for p in self.points if not p.started and p.signature in self.model.monotone]

    def contradicted(self) -> dict[int, int]:
        """Failures a later start contradicts: {failed trial: the trial that started with at most
        its room and at least its need}. Such a failure is not evidence (a flaky start, or a knob
        that spends memory the model does not know). Found once per :meth:`fit`."""
        return dict(self._contradicted)

    def predict(self, values: dict[str, Any]) -> Prediction | None:
        if self.model is None:
            return None
        model = self.model
        c = self._point(values)
        if any(_needier(s, c) for s in self.points if s.started):
            return None  # at least the memory of a config that started: never skipped
        length = _float(values.get(model.length)) if model.length else None
        for p in self.points:  # the model's own limit, named by the engine in a failure
            for key in model.model_limit:
                limit = _float(p.details.get(key))
                if length is not None and limit is not None and length > limit:
                    return Prediction(
                        p.signature or "context_above_model",
                        f"{model.length} {length:,.0f} > the model's {limit:,.0f} (named by the engine in trial {p.number})",
                        {"from_trial": p.number, "rule": "model_limit", "asked": length, "limit": limit},
                    )
        for f in self._failures():
            if f.number in self._contradicted:
                continue
            if _needier(c, f):
                return Prediction(
                    f.signature or "out_of_memory",
                    f"no more memory and at least the need of trial {f.number}, "
                    f"which failed ({f.signature}) on every axis the memory model knows",
                    {"from_trial": f.number, "rule": "dominated", **_axes(model, f, c)},
                )
            limit = _float(f.details.get(model.length_limit)) if model.length_limit else None
            asked = _float(f.values.get(model.length)) if model.length else None
            shorter_ok = model.pool_independent_of_length or _cmp(length, asked, lambda u, v: u >= v)
            if (
                limit is not None
                and length is not None
                and length > limit * (1 + model.pool_margin)
                and shorter_ok
                and _needier(c, f, skip=model.length)
            ):
                return Prediction(
                    f.signature or model.length_signature,
                    f"{model.length} {length:,.0f} > the {limit:,.0f} the engine named "
                    f"for trial {f.number}'s memory, and this config has no more",
                    {"from_trial": f.number, "rule": "engine_named_length", "asked": length, "limit": limit},
                )
        if model.length_fits_pool and length is not None:
            for s in self.points:
                if (
                    s.started
                    and s.kv_tokens is not None
                    and length > s.kv_tokens * (1 + model.pool_margin)
                    and _needier(c, s, skip=model.length)
                ):
                    return Prediction(
                        model.length_signature,
                        f"{model.length} {length:,.0f} > the {s.kv_tokens:,.0f}-token KV pool "
                        f"trial {s.number} reported, and this config has no more memory",
                        {"from_trial": s.number, "rule": "pool_reported", "asked": length, "pool_tokens": s.kv_tokens},
                    )
        return None


def _float(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def _needier(a: _Point, b: _Point, skip: str | None = None) -> bool:
    """Whether ``a`` has no more room than ``b`` and at least its need on every axis (the
    axis named ``skip`` aside), every unmodelled knob equal. Unknown values compare only as equal."""
    if a.others != b.others:
        return False
    for x, y in zip(a.room, b.room, strict=True):
        if not _cmp(x, y, lambda u, v: u <= v):
            return False
    return all(_cmp(x, y, lambda u, v: u >= v) for (name, x), (_, y) in zip(a.needs, b.needs, strict=True) if name != skip)


def _cmp(x: float | None, y: float | None, ok: Callable[[float, float], bool]) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return ok(x, y)


def _axes(model: MemoryModel, f: _Point, c: _Point) -> dict[str, Any]:
    return {
        "room": {a.name: [c.room[i], f.room[i]] for i, a in enumerate(model.room)},
        "needs": {name: [x, y] for (name, x), (_, y) in zip(c.needs, f.needs, strict=True)},
    }


def screen_for(engine: str) -> Screen:
    """The screen for an engine, with the memory model its adapter declares."""
    from tuner import engines  # the registry imports every adapter

    return Screen(engines.get(engine).memory)


def describe_screen(
    trials: Sequence[TrialRecord], screen: Screen, expand: Callable[[dict[str, Any]], dict[str, Any]] = dict
) -> list[str]:
    """The screen's decisions, each with the trial it came from, and the failures a later start
    contradicted (with what was re-proposed), as lines to show."""
    lines = []
    for t in trials:
        if not t.screened:
            continue
        source = f" (evidence: trial {n})" if (n := t.skipped_on) is not None else ""
        lines.append(f"trial {t.number} not launched, predicted {t.screened}{source}: {(t.evidence or {}).get('summary', '')}")
    screen.fit(trials, expand)
    requeued = {t.rescreen_of: t.number for t in trials if t.rescreen_of is not None}
    for failed, started in sorted(screen.contradicted().items()):
        skipped = [t.number for t in trials if t.skipped_on == failed]
        again = ", ".join(f"{n} as trial {requeued[n]}" for n in skipped if n in requeued)
        lines.append(
            f"CONTRADICTED: trial {failed}'s failure, by trial {started} (no more memory, started); "
            f"skipped on its word: {', '.join(map(str, skipped)) or 'none'}" + (f"; re-proposed: {again}" if again else "")
        )
    return lines
