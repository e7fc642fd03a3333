"""Readiness helpers shared by engines that speak the OpenAI-compatible HTTP API."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["completion_works", "counter_total", "metric_labels"]


def completion_works(client: httpx.Client, base_url: str, model: str, extra: dict[str, Any] | None = None) -> bool:
    """One real completion of one token: the only proof that a server serves."""
    body = {"model": model, "prompt": "Hello", "max_tokens": 1, **(extra or {})}
    try:
        reply = client.post(f"{base_url}/v1/completions", json=body)
        return reply.status_code == 200 and bool(reply.json().get("choices"))
    except (httpx.TransportError, ValueError):
        return False


def metric_labels(metrics_text: str, name: str) -> dict[str, str]:
    """Labels of the first sample of Prometheus metric ``name`` (with or without ``_total``)."""
    for line in metrics_text.splitlines():
        if line.startswith((f"{name}{{", f"{name}_total{{")):
            body = line[line.index("{") + 1 : line.rindex("}")]
            pairs = (item.split("=", 1) for item in _split_labels(body))
            return {k.strip(): v.strip().strip('"') for k, v in pairs}
    return {}


def counter_total(metrics_text: str, name: str) -> float | None:
    """Sum over every sample of Prometheus metric ``name`` (with or without ``_total``), or None."""
    values = [
        float(line.rsplit(" ", 1)[-1])
        for line in metrics_text.splitlines()
        if line.split("{", 1)[0].split(" ", 1)[0] in (name, f"{name}_total")
    ]
    return sum(values) if values else None


def _split_labels(body: str) -> list[str]:
    items, current, quoted = [], "", False
    for char in body:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            items.append(current)
            current = ""
        else:
            current += char
    return [*items, current] if current else items
