"""Credentials never leave the URL they came in: a storage URL is shown with its password masked."""

from __future__ import annotations

import re

__all__ = ["mask"]

# scheme://user:password@host -> scheme://user:***@host, also inside a longer text and where a path
# normalization left one slash (runs/s=postgresql:/alice:pw@host)
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][\w+.-]*:/+[^\s:/@]*:)(?P<password>[^\s@/]+)(?P<at>@)")
_QUERY = re.compile(r"(?P<head>[?&](?:password|passwd|pwd)=)(?P<password>[^&\s]+)", re.IGNORECASE)


def mask(text: str) -> str:
    """``text`` with every URL password in it (user info or a ``password=`` query) replaced by
    *** (a storage URL, or an error that quotes one)."""
    text = _USERINFO.sub(lambda m: f"{m['head']}***{m['at']}", text)
    return _QUERY.sub(lambda m: f"{m['head']}***", text)
