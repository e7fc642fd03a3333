"""The house rules the code itself can check: engine knowledge lives in tuner/engines/ (no engine is
named anywhere else in the code: comments and docstrings may cite one as an example)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

ENGINE_NAMES = re.compile(r"(?i)vllm|sglang|llama[._-]?cpp|llama-server")
# a name that is not engine knowledge, and why
ALLOWED = {("tuner/space/_load.py", "cpu-llamacpp"): "the embedded default space's file name"}


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }


def _words(node: ast.AST, docs: set[int]) -> list[str]:
    """The identifiers and string literals a node puts in the code (docstrings aside)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
        return [node.value]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def engine_names_outside_engines(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        if rel.startswith(f"{package.name}/engines/"):
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            for word in _words(node, docs):
                if ENGINE_NAMES.search(word) and (rel, word) not in ALLOWED:
                    found.append(f"{rel}:{getattr(node, 'lineno', '?')}: {word!r}")
    return found


def test_no_engine_is_named_outside_the_engines_package() -> None:
    assert engine_names_outside_engines(ROOT / "tuner") == []


def test_the_check_finds_an_engine_name_in_code_but_not_in_prose(tmp_path: Path) -> None:
    package = tmp_path / "tuner"
    (package / "engines").mkdir(parents=True)
    (package / "engines" / "vllm.py").write_text('NAME = "vllm"\n')
    (package / "export.py").write_text(
        '"""Exports (vLLM reads a config file)."""\n'
        "def f(engine):  # sglang: see the adapter\n"
        '    return engine == "vllm"\n'
        "from tuner.engines import llamacpp_provision\n"
    )
    assert sorted(engine_names_outside_engines(package)) == ["tuner/export.py:3: 'vllm'", "tuner/export.py:4: 'llamacpp_provision'"]
