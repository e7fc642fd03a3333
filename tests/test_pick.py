"""Picks find throughput and context by role (tuner.objectives), never by position: replayed on
the committed H200 study whose second objective is the KV pool, not a context."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest

from tuner.exceptions import ConfigError
from tuner.objectives import CONFIGURED_CONTEXT, ObjectiveSet, load, role_of
from tuner.pick import candidates, context_metric, pick, role_index

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def _study(name: str, tmp_path: Path) -> optuna.Study:
    db = tmp_path / "study.db"
    shutil.copy(FIXTURES / name / "study.db", db)
    return optuna.load_study(study_name=name, storage=f"sqlite:///{db}")


def test_roles_follow_from_metric_names_unless_given() -> None:
    assert role_of("load.output_tok_s@128") == "throughput"
    assert role_of("recall.effective_context") == "context"
    assert role_of("capacity.kv_tokens") == "capacity"
    assert role_of("load.error_rate") is None
    objective = load("throughput-slo")
    assert [o.role for o in objective.objectives] == ["throughput", "capacity"]
    assert objective.index_of("context") is None and load("throughput-vs-context-slo").index_of("context") == 1


def test_two_objectives_of_one_role_are_refused() -> None:
    with pytest.raises(ValueError, match="share a role"):
        ObjectiveSet(name="x", objectives=[{"metric": "load.output_tok_s", "direction": "maximize"},
                                           {"metric": "load.total_tok_s", "direction": "maximize"}])


def test_max_context_on_a_study_without_a_context_objective_uses_the_configured_context(tmp_path: Path) -> None:
    study = _study("h200-vllm", tmp_path)
    assert role_index(study, "context") is None and context_metric(study) == CONFIGURED_CONTEXT
    served = {c.number: c.trial.user_attrs["metrics"][CONFIGURED_CONTEXT] for c in candidates(study)}
    assert len(set(served.values())) > 1, served
    chosen = pick(study, "max-context")
    assert served[chosen.number] == max(served.values())  # the 32,768 trial, not the largest KV pool
    assert chosen.trial.user_attrs["metrics"][CONFIGURED_CONTEXT] == 32768
    above = pick(study, "knee", min_context=16384)
    assert served[above.number] >= 16384
    with pytest.raises(ConfigError, match=r"capacity.context_per_request >= 1e\+06"):
        pick(study, "knee", min_context=1e6)


def test_max_throughput_uses_the_throughput_role(tmp_path: Path) -> None:
    study = _study("h200-vllm", tmp_path)
    best = max(candidates(study), key=lambda c: c.values[0])
    assert pick(study, "max-throughput").number == best.number
