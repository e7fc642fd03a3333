"""The suite's ordering helper: seconds per test from a run's --durations output."""

from __future__ import annotations

from pathlib import Path

from tests.durations import load, parse


def test_phases_of_a_test_are_summed_and_quick_ones_left_out(tmp_path: Path) -> None:
    text = """
============================= slowest durations =============================
50.00s setup    tests/test_report.py::test_front_and_plots
 2.50s call     tests/test_report.py::test_front_and_plots
 1.00s call     tests/test_limits.py::test_quick
"""
    assert parse(text) == {"tests/test_report.py::test_front_and_plots": 52.5}
    path = tmp_path / "durations.txt"
    path.write_text("# a comment\n  52.5 tests/test_report.py::test_front_and_plots\n")
    assert load(path) == {"tests/test_report.py::test_front_and_plots": 52.5}
    assert load(tmp_path / "missing.txt") == {}
