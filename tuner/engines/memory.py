"""What an engine spends memory on, as the pre-screen (tuner.results.screen) compares configs by it.

Each engine adapter declares one :class:`MemoryModel`: the knobs that give memory (``room``: a
larger GPU memory fraction leaves more for the KV cache), the ones that spend it (``needs``: a
longer context, more sequences, a wider KV dtype), the knobs that spend none (``free``), and the
failures that memory running out causes (``monotone``: more room never makes them appear, more
need never makes them go away). Any other knob is not modelled: two configs are comparable only
where such knobs are equal, so an unknown knob makes the screen decline, never guess.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Axis", "MemoryModel", "kv_bytes", "number"]


@dataclass(frozen=True)
class Axis:
    """One direction of memory: a number computed from ``knobs`` (None: cannot tell)."""

    name: str
    knobs: tuple[str, ...]
    value: Callable[[Mapping[str, Any]], float | None]


def number(knob: str, default: float | None = None) -> Axis:
    """An axis that is a knob's own value (``default`` where the config leaves it to the engine)."""

    def read(values: Mapping[str, Any]) -> float | None:
        raw = values.get(knob, default)
        try:
            return None if raw is None or isinstance(raw, bool) else float(raw)
        except (TypeError, ValueError):
            return None

    return Axis(knob, (knob,), read)


def kv_bytes(knob: str, bytes_by_dtype: Mapping[str, float], default: str = "auto") -> Axis:
    """Bytes per cached element of a KV dtype knob (an unknown dtype: None, no comparison)."""

    def read(values: Mapping[str, Any]) -> float | None:
        return bytes_by_dtype.get(str(values.get(knob, default)))

    return Axis(knob, (knob,), read)


@dataclass(frozen=True)
class MemoryModel:
    """An engine's memory knobs (see the module docstring).

    ``length``: the per-request context knob. ``length_limit``: the evidence detail in which the
    engine names the longest length that fits a failed config's memory (vLLM's "estimated maximum
    model length"): it decides for a shorter length than the failed one only where the pool does not
    shrink with the length (``pool_independent_of_length``, a measured fact of the engine).
    ``length_fits_pool``: a length above the KV pool (capacity.kv_tokens) cannot
    start (vLLM), and ``length_signature`` is the failure signature the engine's own words get
    there (a skip predicted from a named or reported limit carries it); ``model_limit``: the
    detail naming the model's own longest context, above which nothing starts whatever the memory
    (SGLang's derived context length). ``pool_margin``: how much the pool the engine reports (or
    names a length from) varies between two starts of the same memory settings, relative; a
    length within it of the named or reported one is not skipped."""

    room: tuple[Axis, ...]
    needs: tuple[Axis, ...]
    monotone: frozenset[str]
    free: frozenset[str] = frozenset()
    length: str | None = None
    length_limit: str | None = None
    length_fits_pool: bool = False
    length_signature: str = "context_above_kv_pool"
    pool_independent_of_length: bool = False
    model_limit: tuple[str, ...] = ()
    pool_margin: float = 0.0

    @property
    def modelled(self) -> frozenset[str]:
        return frozenset(k for axis in (*self.room, *self.needs) for k in axis.knobs) | self.free
