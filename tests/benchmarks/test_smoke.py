"""Each benchmark runs at a tiny size, so a change that breaks one is red in CI (their ratios are
measured by running them by hand, never asserted here: these machines are shared and noisy)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.integration
def test_partitions_benchmark_runs(llama_server: Path, smollm2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _load("partitions").main(2)
    assert "ratio 2 vs 1 partitions" in capsys.readouterr().out


@pytest.mark.integration
def test_noise_benchmark_runs(llama_server: Path, smollm2: Path, tmp_path: Path) -> None:
    out = tmp_path / "noise.json"
    report = _load("noise").main(
        ["--space", "cpu-llamacpp", "--params", '{"parallel": 2}', "--fresh", "2", "--windows", "1",
         "--duration", "1", "--max-duration", "2", "--json", str(out)]
    )
    assert len(report["fresh"]) == 2 and len(report["windows"]) == 1 and out.is_file()
    assert report["fresh_spread"] >= 0 and report["fresh"][0]["tok_s"] > 0
