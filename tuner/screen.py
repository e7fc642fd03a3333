"""Pre-screen: predict from the study's own history that a config cannot start, and skip it.

Every launch of a config that cannot start costs a full startup (minutes on GPUs). Each engine
has a small memory model; it is fitted to the study's finished trials (successes with their
capacity lines, failures with the numbers the engine printed) and only predicts a failure when
the evidence is one-sided:

- llama.cpp: the KV cache a config needs (ctx-size x bytes per token of its K and V types) is
  compared with configs already tried. Needing at least as much as a config whose KV did not
  fit -> fails; needing no more than a config that started -> starts; otherwise: launch.
- vLLM / SGLang: the KV pool grows linearly with the memory fraction (gpu-memory-utilization,
  mem-fraction-static). Points come from capacity lines of successes and from failures that
  name the pool (vLLM's "estimated maximum model length"). With two points the line predicts
  the pool of a new fraction; a pool <= 0, or smaller than the asked max-model-len, fails.
  A context length above the model's derived one (seen once in a failure) fails.

A skipped config becomes a PRUNED trial whose evidence is the prediction (never silent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

__all__ = ["Prediction", "Screen", "screen_for"]

# bytes per token per layer-set of SmolLM2-135M's K (or V) cache, from llama.cpp's own KV sizes
# (engines.md: 180 MiB f16, 95.6 MiB q8_0, 50.6 MiB q4_0 at 8192 tokens, K+V): K and V alike.
LLAMACPP_KV_BYTES = {"f16": 11.25 * 1024, "bf16": 11.25 * 1024, "q8_0": 5.98 * 1024, "q4_0": 3.16 * 1024, "q4_1": 3.52 * 1024, "q5_0": 3.87 * 1024, "q5_1": 4.22 * 1024}


@dataclass(frozen=True)
class Prediction:
    """A predicted failure, with the numbers behind it."""

    signature: str
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)


class Screen:
    """Base: predicts nothing (every config is launched).

    ``predict`` takes everything a launch would set (fixed flags, params, tied flags); ``fit``
    takes the study's trials and ``expand``, which completes a trial's params the same way."""

    expand: Callable[[dict[str, Any]], dict[str, Any]] = staticmethod(dict)  # type: ignore[assignment]

    def fit(self, trials: Sequence[FrozenTrial], expand: Callable[[dict[str, Any]], dict[str, Any]] = dict) -> None:
        self.expand = expand
        self.trials = [
            t for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and not {"screened", "duplicate_of", "invalid_combination"} & t.user_attrs.keys()
        ]

    def predict(self, values: dict[str, Any]) -> Prediction | None:
        return None


def _started(t: FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE


def _signature(t: FrozenTrial) -> str | None:
    return t.user_attrs.get("signature")


class LlamaCppScreen(Screen):
    MEMORY_FAILURES = {"kv_cache_oom", "out_of_memory"}

    @staticmethod
    def need(values: dict[str, Any]) -> float | None:
        ctx = values.get("ctx-size")
        k = LLAMACPP_KV_BYTES.get(str(values.get("cache-type-k", "f16")))
        v = LLAMACPP_KV_BYTES.get(str(values.get("cache-type-v", "f16")))
        return None if ctx is None or k is None or v is None else float(ctx) * (k + v)

    def predict(self, values: dict[str, Any]) -> Prediction | None:
        need = self.need(values)
        if need is None:
            return None
        failed = [n for t in self.trials if _signature(t) in self.MEMORY_FAILURES and (n := self.need(self.expand(t.params))) is not None]
        started = [n for t in self.trials if _started(t) and (n := self.need(self.expand(t.params))) is not None]
        if failed and need >= min(failed) and not any(s >= need for s in started):
            return Prediction(
                "kv_cache_oom",
                f"needs {need / 2**20:,.0f} MiB of KV, at least the {min(failed) / 2**20:,.0f} MiB of a config whose KV did not fit",
                {"kv_bytes": need, "smallest_failed_kv_bytes": min(failed), "largest_started_kv_bytes": max(started, default=None)},
            )
        return None


class PoolScreen(Screen):
    """vLLM and SGLang: KV pool tokens linear in the memory fraction."""

    def __init__(self, fraction: str, length: str, fitted_signature: str, derived_key: str | None, too_long_signature: str | None) -> None:
        self.fraction = fraction
        self.length = length
        self.fitted_signature = fitted_signature
        self.derived_key = derived_key
        self.too_long_signature = too_long_signature

    def _points(self) -> list[tuple[float, float]]:
        points = {}
        for t in self.trials:
            f = t.params.get(self.fraction)
            if f is None:
                continue
            kv = t.user_attrs.get("capacity", {}).get("kv_tokens") if _started(t) else None
            details = t.user_attrs.get("evidence", {}).get("details", {})
            kv = kv or details.get("estimated_max_model_len")
            if kv:
                points[float(f)] = float(kv)
        return sorted(points.items())

    def _derived_length(self) -> float | None:
        for t in self.trials:
            details = t.user_attrs.get("evidence", {}).get("details", {})
            if self.derived_key and details.get(self.derived_key):
                return float(details[self.derived_key])
        return None

    def predict(self, values: dict[str, Any]) -> Prediction | None:
        length = values.get(self.length)
        derived = self._derived_length()
        if self.too_long_signature and length is not None and derived is not None and float(length) > derived:
            return Prediction(self.too_long_signature, f"{self.length} {length} > the model's derived {derived:,.0f} (seen in an earlier failure)",
                              {"asked": length, "derived": derived})
        points = self._points()
        fraction = values.get(self.fraction)
        if fraction is None or len(points) < 2:
            return None
        (f1, k1), (f2, k2) = points[0], points[-1]
        if f2 == f1:
            return None
        pool = k1 + (k2 - k1) / (f2 - f1) * (float(fraction) - f1)
        if pool <= 0:
            return Prediction(self.fitted_signature, f"{self.fraction} {fraction} leaves no KV pool (fitted {pool:,.0f} tokens)",
                              {"fitted_pool_tokens": pool, "points": points})
        if length is not None and float(length) > 1.1 * pool > 0:
            return Prediction("max_model_len_exceeds_kv", f"{self.length} {length} exceeds the fitted pool of {pool:,.0f} tokens at {fraction}",
                              {"fitted_pool_tokens": pool, "asked": length, "points": points})
        return None


def screen_for(engine: str) -> Screen:
    if engine == "llamacpp":
        return LlamaCppScreen()
    if engine == "vllm":
        return PoolScreen("gpu-memory-utilization", "max-model-len", "no_kv_cache_memory", None, None)
    if engine == "sglang":
        return PoolScreen("mem-fraction-static", "context-length", "not_enough_memory", "derived_context_length", "context_above_derived")
    return Screen()
