"""The application layer's run configuration: what `tune run` decides from its options before it
starts anything (the run itself is exercised end to end by the CLI and package tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import tiny_space
from tuner.app.run import configure, max_parallel, plan_lines
from tuner.base.exceptions import ConfigError


def _space(tmp_path: Path, **hardware: object) -> str:
    raw = tiny_space()
    raw["hardware"].update(hardware)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    return str(tmp_path / "s.yaml")


def test_the_options_fill_in_from_the_space(tmp_path: Path) -> None:
    config = configure(_space(tmp_path), timeout="15m")
    assert config.study == config.space.name and config.trials == config.space.budget.trials
    assert config.timeout == 900.0 and config.executor == "ray" and config.screen and config.remeasure
    assert configure(_space(tmp_path), study="night", trials=7).study == "night"
    assert configure(_space(tmp_path), trials=7).trials == 7


def test_a_bad_option_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--executor: 'threads' is not one of ray, inline"):
        configure(_space(tmp_path), executor="threads")
    with pytest.raises(ConfigError, match="--timeout"):
        configure(_space(tmp_path), timeout="soon")


def test_trials_at_a_time_follow_the_partitions_and_the_executor(tmp_path: Path) -> None:
    config = configure(_space(tmp_path, devices=[0, 1], per_trial=1))
    assert max_parallel(config.space) == 2 and config.max_parallel == 2
    assert configure(_space(tmp_path, devices=[0, 1], per_trial=1), executor="inline").max_parallel == 1


def test_the_remeasure_plan_is_the_spaces_unless_switched_off(tmp_path: Path) -> None:
    assert configure(_space(tmp_path)).plan is not None
    assert configure(_space(tmp_path), remeasure=False).plan is None


def test_a_dry_run_plans_without_creating_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lines = plan_lines(configure(_space(tmp_path)))
    assert any(line.startswith("estimate:") for line in lines) and not (tmp_path / "runs").exists()
