"""A resumed study whose stored space differs from the one given is refused, naming the keys that
differ: also where the file is the same and a newer tuner's schema or its requests changed."""

from __future__ import annotations

import optuna
import pytest

from tests.conftest import tiny_space
from tuner.app.prepare import validate
from tuner.base.exceptions import ConfigError
from tuner.objectives import load as load_objective_set
from tuner.trials.study import differences, open_study


def test_differences_name_changed_added_and_missing_keys() -> None:
    stored = {"probes": {"load": {"prompt_tokens": 512, "api": "completions"}}, "budget": {"trials": 4}}
    current = {"probes": {"load": {"prompt_tokens": 1024, "api": "completions", "request": {}}}, "budget": {"trials": 4}}
    assert differences(stored, current) == ["probes.load.prompt_tokens", "probes.load.request"]
    assert differences(current, current) == []
    assert differences({"a": [1, 2]}, {"a": [1, 3]}) == ["a"]


def test_a_space_stored_before_the_request_field_is_refused_naming_it(tmp_path) -> None:
    """A study stored by a tuner whose load probe sent min_tokens and had no ``request`` field:
    its trials were measured with another request body, so it is a different space."""
    space = validate(tiny_space(), "tiny.yaml")
    objective = load_objective_set(space.objectives)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    open_study(space, objective, name="s", storage=storage, source="tiny.yaml")
    study = optuna.load_study(study_name="s", storage=storage)
    old = study.user_attrs["tuner.space"]
    del old["probes"]["load"]["request"]
    study.set_user_attr("tuner.space", old)
    study.set_user_attr("tuner.space_sha256", "0" * 64)  # as the older space hashed
    with pytest.raises(ConfigError) as refused:
        open_study(space, objective, name="s", storage=storage, source="tiny.yaml")
    said = str(refused.value)
    assert "was created with a different space (tiny.yaml: probes.load.request differ)" in said, said
