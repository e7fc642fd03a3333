"""Capacity: what the running server says it holds, from its log AND its endpoints.

The engine adapter knows where to look (log lines; llama.cpp /props and /slots, vLLM /metrics,
SGLang /get_server_info); the last log line wins; every source is kept and disagreements are
flagged on the record (tuner.engines._capacity.reconcile)."""

from __future__ import annotations

import logging

import httpx

from tuner.base.records import Capacity
from tuner.engines import EngineAdapter

__all__ = ["read_capacity"]

logger = logging.getLogger(__name__)


def read_capacity(
    adapter: EngineAdapter, log_text: str, base_url: str | None, *, headers: dict[str, str] | None = None
) -> Capacity:
    if base_url is None:
        return adapter.capacity(log_text, None, None)
    with httpx.Client(timeout=10.0, trust_env=False, headers=headers or {}) as client:
        capacity = adapter.capacity(log_text, client, base_url)
    for note in capacity.disagreements:
        logger.warning("capacity sources disagree: %s", note)
    return capacity
