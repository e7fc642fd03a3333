"""Engine adapters, registered by name."""

from __future__ import annotations

from tuner.base.exceptions import ConfigError
from tuner.engines._base import Command, EngineAdapter, FreshSpread, render_flag
from tuner.engines._openai import counter_total
from tuner.engines._signatures import DISTANCE, Category, Signature, SignatureMatch, classify, first_fatal, raised_exception

__all__ = [
    "DISTANCE",
    "Category",
    "Command",
    "EngineAdapter",
    "FreshSpread",
    "Signature",
    "SignatureMatch",
    "classify",
    "counter_total",
    "first_fatal",
    "get",
    "names",
    "raised_exception",
    "register",
    "render_flag",
]

_REGISTRY: dict[str, type[EngineAdapter]] = {}


def register(cls: type[EngineAdapter]) -> type[EngineAdapter]:
    _REGISTRY[cls.name] = cls
    return cls


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str) -> EngineAdapter:
    """The adapter registered as ``name``; an unknown name lists the known ones."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ConfigError(f"engine {name!r} is not registered; available: {names()}") from None


def _register_builtin() -> None:
    from tuner.engines.llamacpp import LlamaCppAdapter
    from tuner.engines.sglang import SglangAdapter
    from tuner.engines.vllm import VllmAdapter

    for cls in (LlamaCppAdapter, VllmAdapter, SglangAdapter):
        register(cls)


_register_builtin()
