"""The open-loop SLO search as it is against two variants (docs/goodput.md, eleventh session), on
the suite's synthetic servers (tests/probes/test_slo.py): the answer, the levels and the holds
each runs, with the space's budget (7 levels, 3 holds, resolution 10 %, start 32 requests/s), and
the search as it is with a fourth hold.

    python docs/data/goodput/search-variants/compare.py > docs/data/goodput/search-variants/compare.txt

Each variant is tuner/probes/slo.py as it was when this table was made (BASE, from git), with its
patch applied (in a temporary folder); the search has changed since (docs/goodput.md)."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from tests.probes.test_slo import ITL_BOUND, _growth_server, _latency_server, _saturating_server  # noqa: E402
from tuner.space.schema import SloProbeSpec  # noqa: E402

HERE = Path(__file__).parent
BASE = "f42e871"  # the search as it was for this table (the eleventh session's last commit)


def _module(name: str, patch: Path | None, folder: Path) -> ModuleType:
    path = folder / f"{name}.py"
    path.write_text(
        subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{BASE}:tuner/probes/slo.py"], capture_output=True, text=True, check=True
        ).stdout
    )
    if patch is not None:
        subprocess.run(["patch", "--quiet", str(path), str(patch)], check=True)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    servers = [
        *((f"saturating, holds to {t}", lambda c, t=t: _saturating_server(c, holds_to=t)) for t in (34, 38, 40, 42, 45, 48, 51)),
        ("latency stall, holds to 40", lambda c: _latency_server(c, stall_to=40)),
        ("latency stall, holds to 31", lambda c: _latency_server(c, stall_to=31)),
        ("growth stall, holds to 31", lambda c: _growth_server(c, holds_at=31)),
        ("growth stall, holds to 27", lambda c: _growth_server(c, holds_at=27)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        as_it_is = _module("as_it_is", None, Path(tmp))
        designs = {
            "as it is": (as_it_is, 3),
            "near step": (_module("near_step", HERE / "near-step.patch", Path(tmp)), 3),
            "near step, holds bisect": (_module("near_step_holds", HERE / "near-step-holds-bisect.patch", Path(tmp)), 3),
            "as it is, 4 holds": (as_it_is, 4),
        }
        print("| server | " + " | ".join(designs) + " |")
        print("|---" * (len(designs) + 1) + "|")
        for name, make in servers:
            cells = []
            for module, holds in designs.values():
                spec = SloProbeSpec(mode="rate", start_rate=32, max_levels=7, resolution=0.1, holds=holds)
                calls: list[tuple[str, float]] = []
                measure, hold = make(calls)
                found = asyncio.run(module.search_rate(measure, ITL_BOUND, spec, hold=hold))
                levels = sum(1 for kind, _ in calls if kind == "level")
                cells.append(f"{found.answer:.3g} ({levels} levels, {len(calls) - levels} holds)")
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
