"""Fronts carry each point's 95 % half-widths: the ones the pick compares with for objectives."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna

from tests.conftest import ROOT
from tuner.results.pareto import fronts
from tuner.results.pick import candidates, objective_metrics
from tuner.results.plots import front_html, front_png


def test_the_h200_goodput_front_has_the_picks_half_widths_and_draws_them(tmp_path: Path) -> None:
    shutil.copy(ROOT / "docs" / "data" / "goodput" / "h200-vllm-goodput.db", tmp_path / "s.db")
    study = optuna.load_study(study_name="h200-vllm-goodput", storage=f"sqlite:///{tmp_path / 's.db'}")
    x, y = "recall.effective_context", "slo.goodput"
    (front,) = fronts({"h200": study}, x, y)
    names = objective_metrics(study)
    widths = {c.number: dict(zip(names, c.half_widths, strict=True)) for c in candidates(study)}
    on_front = {p.trial: p for p in front.front}
    assert 5 in on_front and on_front[5].y_hw == widths[5][y] > 0  # the pick: 12,497 +- 3,960 (docs/goodput.md)
    assert all(p.x_hw is None and p.y_hw is None for p in front.faint)  # no bars on what did not serve
    front_png([front], x, y, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert '"error_y":{"array":[' in front_html([front], x, y, full_html=False).replace(" ", "")
