"""A level's figures are one typed record: what the probes build, what the study stores, and what
every reader reads by attribute, from studies of any age."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from tests.conftest import ROOT
from tuner.base.level import Level, levels_in
from tuner.probes._stream import RequestRecord
from tuner.probes.load import open_loop_figures, summarize
from tuner.trials import read_study


def _records() -> list[RequestRecord]:
    found = []
    for i in range(40):
        at = i * 0.25
        stamps = [at + 0.05 * k for k in range(1, 5)]
        found.append(RequestRecord(True, at, 0.05, 0.2, stamps, 8, 4, sent=at, asked_prompt=8, asked_output=4))
    return found


def test_every_figure_a_window_summarizes_is_a_field_and_comes_back_as_stored() -> None:
    """``summarize`` and ``open_loop_figures`` give nothing a Level has no field for (``Level.of``
    refuses an unknown figure), and a stored level reads back equal, slices and tuples included."""
    records = _records()
    arrivals = [i * 0.25 for i in range(40)]
    figures = {**summarize(records, 1.0, 9.0, 4, 4, 8), **open_loop_figures(records, 1.0, 9.0, 4.0, 0, 0.0, arrivals)}
    level = Level.of({**figures, "window_at": [1.0, 9.0], "slices": [{"output_tok_s": 16.0, "broke": []}]})
    assert level.requests == 32 and level.rate == 4.0 and level.offered_rate == pytest.approx(4.0)
    assert level.window_at == (1.0, 9.0) and level.slices is not None and level.slices[0].broke == ()
    stored = json.loads(json.dumps(level.to_dict()))
    assert Level.from_dict(stored) == level
    assert None not in stored.values()  # what it did not measure is left out, and reads back as None
    with pytest.raises(ValueError, match="no field for a_new_figure"):
        Level.of({**figures, "a_new_figure": 1.0})


def test_levels_of_a_committed_study_read_by_attribute_old_keys_ignored(tmp_path: Path) -> None:
    """The SLO levels of a study stored before the record existed (with ``backlog_allowance``, a
    key no level stores now) read as Levels: the broken level's verdict, its open-loop figures."""
    db = ROOT / "docs/data/goodput/h200-rate-2026-12-03/study.db"
    stored = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    trial = read_study(stored).trials[0]
    raw = trial.slo["levels"]
    assert any("backlog_allowance" in v for v in raw.values())
    levels = levels_in(trial.slo)
    assert set(levels) == set(raw)
    for name, level in levels.items():
        assert level.held == raw[name]["held"] and list(level.broke or ()) == raw[name]["broke"]
        assert level.achieved_rate == raw[name]["achieved_rate"] and level.rate == float(name)
