"""The search spaces and objective sets shipped inside the package (a checkout links them to the
repository's top-level search_spaces/ and objectives/), read through importlib.resources so that an
installed wheel finds them as an editable checkout does."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

__all__ = ["shipped"]


def shipped(kind: str) -> Path:
    """The folder of shipped ``search_spaces`` or ``objectives``."""
    return Path(str(importlib.resources.files("tuner.data").joinpath(kind)))
