"""Constraints between parameters: ``"ubatch-size <= batch-size"``, ``"tp * dp <= 8"``.

Grammar: ``product OP product`` where ``product`` is ``term ('*' term)*``, ``term`` a
parameter name, a fixed flag name or a number, and ``OP`` one of ``<= < >= > == !=``.
Parameter names may contain ``-``, so there is no subtraction.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Constraint", "parse_constraint"]

_TOKEN = re.compile(r"\s*(<=|>=|==|!=|<|>|\*|[0-9]+(?:\.[0-9]+)?|[A-Za-z_][A-Za-z0-9_-]*)")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
    "==": operator.eq,
    "!=": operator.ne,
}


@dataclass(frozen=True)
class Constraint:
    text: str
    left: tuple[str | float, ...]
    op: str
    right: tuple[str | float, ...]

    @property
    def names(self) -> set[str]:
        return {t for t in (*self.left, *self.right) if isinstance(t, str)}

    def holds(self, values: Mapping[str, Any]) -> bool:
        return _OPS[self.op](_product(self.left, values), _product(self.right, values))

    def violation(self, values: Mapping[str, Any]) -> float:
        """How far from holding: 0 when it holds, else the relative gap (>0)."""
        if self.holds(values):
            return 0.0
        if self.op in ("==", "!="):
            return 1.0
        left, right = _product(self.left, values), _product(self.right, values)
        return max(abs(left - right) / max(abs(right), 1.0), 1e-6)


def _product(terms: tuple[str | float, ...], values: Mapping[str, Any]) -> float:
    return math.prod(float(values[t]) if isinstance(t, str) else t for t in terms)


def parse_constraint(text: str) -> Constraint:
    """Parse one constraint; ``ValueError`` with the reason when it is malformed."""
    tokens = _tokenize(text)
    ops = [i for i, tok in enumerate(tokens) if tok in _OPS]
    if len(ops) != 1:
        raise ValueError(f"constraint {text!r} needs exactly one of {' '.join(_OPS)}")
    at = ops[0]
    return Constraint(text, _parse_product(tokens[:at], text), tokens[at], _parse_product(tokens[at + 1 :], text))


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError(f"constraint {text!r}: unexpected {text[pos:].strip()[:10]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    return tokens


def _parse_product(tokens: list[str], text: str) -> tuple[str | float, ...]:
    terms = tokens[::2]
    if not terms or any(t != "*" for t in tokens[1::2]) or any(t in _OPS or t == "*" for t in terms):
        raise ValueError(f"constraint {text!r} is not of the form 'a <= b' or 'a * b <= c'")
    return tuple(float(t) if t[0].isdigit() else t for t in terms)
