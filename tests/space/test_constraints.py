from __future__ import annotations

import optuna
import pytest

from tests.conftest import tiny_space
from tuner import space as spaces
from tuner.app import prepare
from tuner.space import parse_constraint


@pytest.mark.parametrize(
    ("text", "values", "holds"),
    [
        ("ubatch-size <= batch-size", {"ubatch-size": 256, "batch-size": 512}, True),
        ("ubatch-size <= batch-size", {"ubatch-size": 512, "batch-size": 256}, False),
        ("tp * dp <= 8", {"tp": 4, "dp": 2}, True),
        ("tp * dp <= 8", {"tp": 8, "dp": 2}, False),
        ("cuda-graph-max-bs < 64", {"cuda-graph-max-bs": 64}, False),
        ("a != b", {"a": 1, "b": 1}, False),
    ],
)
def test_constraint_holds(text: str, values: dict, holds: bool) -> None:
    c = parse_constraint(text)
    assert c.holds(values) is holds
    assert (c.violation(values) == 0) is holds


@pytest.mark.parametrize("text", ["a <= b <= c", "a b", "<= b", "a <= ", "a - b <= 3", "a <= b;"])
def test_malformed_constraint(text: str) -> None:
    with pytest.raises(ValueError):
        parse_constraint(text)


def test_violation_grows_with_distance() -> None:
    c = parse_constraint("ubatch-size <= batch-size")
    assert c.violation({"ubatch-size": 1024, "batch-size": 256}) > c.violation({"ubatch-size": 512, "batch-size": 256})


def test_suggest_and_violations() -> None:
    raw = tiny_space()
    raw["parameters"] = {
        "batch-size": {"type": "categorical", "choices": [128]},
        "ubatch-size": {"type": "categorical", "choices": [512]},
        "ctx-size": {"type": "int", "low": 1024, "high": 4096, "log": True},
    }
    raw["constraints"] = ["ubatch-size <= batch-size"]
    space = prepare.validate(raw, "t.yaml")
    trial = optuna.create_study().ask()
    params = spaces.suggest(trial, space)
    assert 1024 <= params["ctx-size"] <= 4096
    assert [c.text for c in spaces.violated_constraints(space, params)] == ["ubatch-size <= batch-size"]
