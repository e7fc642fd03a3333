"""The house rules the code itself can check: what a study stores is read and written in tuner/trials/
only; engine knowledge lives in tuner/engines/ (no engine is
named anywhere else in the code: comments and docstrings may cite one as an example), and the
modules import each other without a cycle (function-local imports count: they hid two)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

ENGINE_NAMES = re.compile(r"(?i)vllm|sglang|llama[._-]?cpp|llama-server")
# a name that is not engine knowledge, and why
ALLOWED = {("tuner/app/prepare.py", "cpu-llamacpp"): "the embedded default space's file name"}


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
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


def _code(package: Path, *, outside: str) -> Iterator[tuple[str, ast.AST, set[int]]]:
    """Each module of ``package`` not under ``outside`` (a path below the package, or a module
    file): its path from the package's parent, its syntax tree, and its docstrings' node ids."""
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        if rel.startswith(f"{package.name}/{outside}"):
            continue
        tree = ast.parse(path.read_text(), filename=rel)
        yield rel, tree, _docstrings(tree)


def _strings(package: Path, *, outside: str) -> Iterator[tuple[str, int, str]]:
    """The string literals in code (docstrings aside), with where they are."""
    for rel, tree, docs in _code(package, outside=outside):
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                yield rel, node.lineno, node.value


def engine_names_outside_engines(package: Path) -> list[str]:
    found = []
    for rel, tree, docs in _code(package, outside="engines/"):
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
    assert sorted(engine_names_outside_engines(package)) == [
        "tuner/export.py:3: 'vllm'",
        "tuner/export.py:4: 'llamacpp_provision'",
    ]


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at run time, wherever the import statement is
    (``if TYPE_CHECKING:`` blocks aside). Importing ``a.b.c`` also imports every package above
    it (``a/b/__init__`` runs first): those count too, except the importer's own parents."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}

    def visit(module: str, node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(module, child)
            return
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            target = resolve(name) if name.split(".")[0] == package.name else None
            if target and target != module and not module.startswith(target + "."):
                graph[module].add(target)
                # importing a.b.c runs a/b/__init__ first: an edge to every parent package the
                # importer is not inside itself (the top package aside: it imports nothing)
                parent = target.rpartition(".")[0]
                while parent.count("."):
                    if parent != module and not module.startswith(parent + "."):
                        graph[module].add(parent)
                    parent = parent.rpartition(".")[0]
        for child in ast.iter_child_nodes(node):
            visit(module, child)

    for module, path in modules.items():
        visit(module, ast.parse(path.read_text()))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def test_the_import_graph_is_acyclic() -> None:
    graph = import_graph(ROOT / "tuner")
    assert len(graph) > 50 and "tuner.host.processes" in graph["tuner.host.ledger"]
    assert cycles(graph) == []


def test_a_cycle_through_a_function_local_import_is_found(tmp_path: Path) -> None:
    package = tmp_path / "tuner"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ledger.py").write_text("def stop():\n    from tuner.server import kill\n")
    (package / "server.py").write_text("from tuner.ledger import stop\nfrom typing import TYPE_CHECKING\n")
    (package / "space.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tuner.engines import x\n")
    (package / "engines.py").write_text("from tuner import space\n")
    assert cycles(import_graph(package)) == [["tuner.ledger", "tuner.server"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    """Importing tuner.space.schema runs tuner/space/__init__ first: an __init__ that re-exports
    a loader importing the engines closes a cycle with any engine module that needs the schema."""
    package = tmp_path / "tuner"
    (package / "space").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "space" / "__init__.py").write_text("from tuner.space.loader import load\n")
    (package / "space" / "schema.py").write_text("")
    (package / "space" / "loader.py").write_text("from tuner import engines\n")
    (package / "engines.py").write_text("from tuner.space.schema import x\n")
    assert cycles(import_graph(package)) == [["tuner.engines", "tuner.space", "tuner.space.loader"]]


# what a study stores is read and written in tuner/trials/ only (its records and its writer)
STORAGE_NAMES = frozenset(
    {
        "user_attrs",
        "system_attrs",
        "set_user_attr",
        "set_system_attr",
        "set_trial_user_attr",
        "set_trial_system_attr",
        "enqueue_trial",
        "set_constraint",
        "tell",
        "_storage",
        "_trial_id",
    }
)


def storage_access_outside_trials(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).as_posix()
        if rel.startswith(f"{package.name}/trials/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.Attribute) and node.attr in STORAGE_NAMES:
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
    return found


def test_only_tuner_trials_reads_or_writes_what_a_study_stores() -> None:
    assert storage_access_outside_trials(ROOT / "tuner") == []


def test_the_check_finds_a_stored_attr_read_outside_trials(tmp_path: Path) -> None:
    package = tmp_path / "tuner"
    (package / "trials").mkdir(parents=True)
    (package / "trials" / "_write.py").write_text("def tell(study, t):\n    study.tell(t)\n")
    (package / "pick.py").write_text("def f(t, study):\n    return t.user_attrs.get('metrics'), study._storage\n")
    assert sorted(storage_access_outside_trials(package)) == ["tuner/pick.py:2: ._storage", "tuner/pick.py:2: .user_attrs"]


def private_imports_across_packages(package: Path) -> list[str]:
    """``from tuner.probes._window import ...`` outside tuner/probes/: a package's private module is its own."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        here = ".".join(rel.with_suffix("").parts[:-1])
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                parts = name.split(".")
                private = next((i for i, p in enumerate(parts) if p.startswith("_")), None)
                if (
                    parts[0] == package.name
                    and private is not None
                    and not (here + ".").startswith(".".join(parts[:private]) + ".")
                ):
                    found.append(f"{rel.as_posix()}:{node.lineno}: {name}")
    return found


def test_no_module_imports_another_packages_private_module() -> None:
    assert private_imports_across_packages(ROOT / "tuner") == []


def test_the_check_finds_a_private_import_across_packages(tmp_path: Path) -> None:
    package = tmp_path / "tuner"
    (package / "probes").mkdir(parents=True)
    (package / "probes" / "load.py").write_text("from tuner.probes._window import t975\n")
    (package / "noise.py").write_text("from tuner.probes._window import t975\nimport tuner.engines._openai\n")
    assert private_imports_across_packages(package) == [
        "tuner/noise.py:1: tuner.probes._window",
        "tuner/noise.py:2: tuner.engines._openai",
    ]


def command_bodies() -> dict[str, int]:
    """Each `tune` command function: lines from its docstring to its end (its options aside)."""
    from tuner.cli import app

    callbacks = [c.callback for c in app.registered_commands]
    callbacks += [c.callback for g in app.registered_groups for c in g.typer_instance.registered_commands]
    found = {}
    for f in callbacks:
        tree = ast.parse((ROOT / (f.__module__.replace(".", "/") + ".py")).read_text())
        node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == f.__name__)
        found[f"{f.__module__}.{f.__name__}"] = node.end_lineno - node.body[0].lineno + 1
    return found


def test_a_command_parses_calls_once_and_prints() -> None:
    """The command line holds no orchestration: each command's body fits in 40 lines (tune run's
    recovery, reference, search, re-measurement and signals live in tuner.app.run)."""
    bodies = command_bodies()
    assert len(bodies) >= 10 and "tuner.cli._run.run" in bodies
    assert {name: n for name, n in bodies.items() if n > 40} == {}


METRIC_NAME = re.compile(r"^(slo|load|recall|capacity|served|overload|telemetry|confirm)\.[a-z][a-z_0-9]*(@\w+)?$")


def metric_literals(package: Path) -> list[str]:
    """String literals in code (docstrings aside) that spell a stored metric's name, outside
    the one module that names them (tuner/base/metrics.py)."""
    return [
        f"{rel}:{line}: {value!r}"
        for rel, line, value in _strings(package, outside="base/metrics.py")
        if METRIC_NAME.match(value)
    ]


def test_metric_names_are_written_once() -> None:
    assert metric_literals(ROOT / "tuner") == []


def test_the_check_finds_a_metric_name_in_code_even_inside_an_f_string(tmp_path: Path) -> None:
    package = tmp_path / "tuner"
    (package / "base").mkdir(parents=True)
    (package / "base" / "metrics.py").write_text('SLO_GOODPUT = "slo.goodput"\n')
    (package / "report.py").write_text(
        '"""Shows slo.goodput."""\ndef f(m):\n    return f"{m[\'load.ttft_p99\']}" + m.get("slo.goodput_ci", "") + "slo."\n'
    )
    assert sorted(metric_literals(package)) == ["tuner/report.py:3: 'load.ttft_p99'", "tuner/report.py:3: 'slo.goodput_ci'"]


def test_benchmarks_and_scripts_use_the_public_api() -> None:
    """benchmarks/ and scripts/ import tuner's public modules only: no private module (``_x``),
    no command-line module (the application layer, tuner.app, is what a script calls)."""
    found = []
    for path in sorted([*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "scripts").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                parts = name.split(".")
                if parts[0] == "tuner" and (any(p.startswith("_") for p in parts) or "cli" in parts):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert found == []


def layers_in_the_map() -> list[str]:
    """The folders of docs/architecture.md's layer table, top to bottom (its first column)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    return re.findall(r"^\| `tuner/(\w+)/` \|", text, re.M)


def upward_imports(package: Path, layers: list[str]) -> list[str]:
    """Imports from a folder to one that is not below it in ``layers`` (top first)."""
    found = []
    for module, targets in sorted(import_graph(package).items()):
        here = module.split(".")[1] if module.count(".") >= 1 and module != "tuner.__main__" else None
        if here is None or here not in layers:
            continue
        for target in sorted(targets):
            there = target.split(".")[1] if target.count(".") >= 1 else None
            if there is None or there == here:
                continue
            if there not in layers or layers.index(there) <= layers.index(here):
                found.append(f"{module} -> {target}")
    return found


def test_the_folders_are_the_layers_and_each_imports_only_those_below_it() -> None:
    """`ls tuner/` is the architecture: every folder is one row of docs/architecture.md's layer
    table, in its order, and a module imports from its own folder or from folders below its own
    (the command line on top, the plain data at the bottom); beside the folders only
    ``__init__.py`` and ``__main__.py``."""
    layers = layers_in_the_map()
    folders = sorted(p.name for p in (ROOT / "tuner").iterdir() if (p / "__init__.py").is_file())
    assert sorted(layers) == folders
    assert sorted(p.name for p in (ROOT / "tuner").glob("*.py")) == ["__init__.py", "__main__.py"]
    assert upward_imports(ROOT / "tuner", layers) == []


def test_the_layer_check_finds_an_import_upwards(tmp_path: Path) -> None:
    package = tmp_path / "tuner"
    for name, text in {
        "base/units.py": "from tuner.results.pick import pick\n",
        "results/pick.py": "from tuner.base.units import parse\nimport tuner.results.table\n",
        "results/table.py": "",
    }.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    # importing tuner.results.pick runs tuner/results/__init__ first: both are upwards
    assert upward_imports(package, ["results", "base"]) == [
        "tuner.base.units -> tuner.results",
        "tuner.base.units -> tuner.results.pick",
    ]


def engine_signature_literals(package: Path, signatures: set[str]) -> list[str]:
    """String literals outside tuner/engines/ (docstrings aside) that are an engine-specific
    failure signature's name: engine knowledge an engine-name search cannot see."""
    return [f"{rel}:{line}: {value!r}" for rel, line, value in _strings(package, outside="engines/") if value in signatures]


def test_no_engine_signature_is_named_outside_the_engines_package() -> None:
    """The screen once named vLLM's max_model_len_exceeds_kv; now the adapter's memory model says it."""
    from tuner import engines

    # generic names the library gives itself, and the coarse categories every engine's signatures share
    shared = {"out_of_memory", "crashed_under_load", "context_above_kv_pool"}
    shared |= {v for k, v in vars(engines.Category).items() if k.isupper()}
    signatures = {s.name for name in engines.names() for s in engines.get(name).signatures} - shared
    assert "max_model_len_exceeds_kv" in signatures
    assert engine_signature_literals(ROOT / "tuner", signatures) == []
