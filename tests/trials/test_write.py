"""The one writer: every exception's state from one table, verdicts as a study stores them, and the
one private Optuna name the writer uses (pinned here: an Optuna that drops it fails this test)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.base.evidence import DISTANCE, Evidence
from tuner.base.exceptions import (
    ConfigError,
    CrashedUnderLoad,
    InfrastructureError,
    InvalidCombination,
    ProbeError,
    ScreenedOut,
    StartupFailed,
    StartupTimeout,
    TeardownError,
    TrialTimeout,
)
from tuner.trials import (
    Kind,
    Verdict,
    enqueue,
    read_study,
    read_trials,
    requeue,
    running_trial,
    save_noise,
    save_revalidation,
    state_for,
    tell,
)

EV = Evidence(argv=("x",), elapsed_s=1.0, signature="kv_cache_oom", reason="no room", details={DISTANCE: 0.5})


@pytest.mark.parametrize(
    ("error", "state"),
    [
        (None, TrialState.COMPLETE),
        (StartupFailed("x", evidence=EV), TrialState.PRUNED),
        (StartupTimeout("x", evidence=EV), TrialState.PRUNED),
        (TrialTimeout("x", evidence=EV), TrialState.PRUNED),
        (CrashedUnderLoad("x", evidence=EV), TrialState.PRUNED),
        (ScreenedOut("x", evidence=EV), TrialState.PRUNED),
        (InvalidCombination("a <= b"), TrialState.PRUNED),
        (ProbeError("x", evidence=EV), TrialState.FAIL),
        (TeardownError("x", evidence=EV), TrialState.FAIL),
        (InfrastructureError("lost worker"), TrialState.FAIL),
        (ConfigError("x"), TrialState.FAIL),
        (KeyError("load.output_tok_s"), TrialState.FAIL),
    ],
)
def test_every_ending_has_one_state(error: BaseException | None, state: TrialState) -> None:
    assert state_for(error) == state


def _study(tmp_path: Path) -> optuna.Study:
    return optuna.create_study(study_name="w", storage=f"sqlite:///{tmp_path / 'w.db'}", directions=["maximize"])


def test_each_kind_of_verdict_reads_back_as_its_record(tmp_path: Path) -> None:
    study = _study(tmp_path)
    dist = {"x": optuna.distributions.IntDistribution(0, 9)}
    ok = study.ask(dist)
    tell(study, ok, Verdict.of(values=[5.0], constraints={"ttft <= 1": 0.0}))
    failed = study.ask(dist)
    tell(study, failed, Verdict.of(error=StartupFailed("no room", evidence=EV)))
    invalid = study.ask(dist)
    tell(study, invalid, Verdict.invalid("x <= 3", {"x <= 3": 2.0}))
    screened = study.ask(dist)
    tell(study, screened, Verdict.of(error=ScreenedOut("predicted", evidence=EV), screened="kv_cache_oom"))
    copy = study.ask(dist)
    tell(study, copy, Verdict.copy_of(read_trials(study)[0]))
    stopped = study.ask(dist)
    tell(study, stopped, Verdict.stopped("asked but never launched: the run stopped"))

    r = read_trials(study)
    assert [t.kind for t in r] == [Kind.LAUNCHED, Kind.LAUNCHED, Kind.INVALID, Kind.SCREENED, Kind.COPY, Kind.LAUNCHED]
    assert [t.state for t in r] == [
        TrialState.COMPLETE,
        TrialState.PRUNED,
        TrialState.PRUNED,
        TrialState.PRUNED,
        TrialState.COMPLETE,
        TrialState.FAIL,
    ]
    assert [t.finished for t in r] == [True, True, False, False, False, False]
    assert r[0].values == (5.0,) and r[0].feasible and r[0].constraints == {"ttft <= 1": 0.0, "server starts": 0.0}
    assert r[1].signature == "kv_cache_oom" and r[1].constraints == {"server starts": 0.5} and not r[1].feasible
    assert r[1].error == EV.describe() and r[1].details == {DISTANCE: 0.5}
    assert r[2].invalid_combination == "x <= 3" and r[2].note == "x <= 3"
    assert r[3].screened == "kv_cache_oom"
    assert r[4].duplicate_of == 0 and r[4].values == (5.0,) and r[4].source == 0 and r[4].note == "copy of 0"
    assert r[5].error == "asked but never launched: the run stopped"
    # optuna-dashboard 0.21 reads feasibility from the plain list only
    assert study.get_trials()[1].system_attrs["constraints"] == [0.5]


def test_study_attrs_and_queue_reasons_read_back(tmp_path: Path) -> None:
    study = _study(tmp_path)
    enqueue(study, {"x": 1}, from_space=True)
    trial = study.ask({"x": optuna.distributions.IntDistribution(0, 9)})
    tell(study, trial, Verdict.of(values=[1.0]))
    save_noise(study, {"reference": {"x": 1}, "runs": [[1.0]], "labels": ["trial"]})
    save_revalidation(study, 0, {"runs": [[1.0], [1.2]]})
    assert requeue(study, study.get_trials()[0])
    record = read_study(study)
    assert record.noise["labels"] == ["trial"] and record.revalidated == {0: {"runs": [[1.0], [1.2]]}}
    assert record.trials[0].revalidated == {"runs": [[1.0], [1.2]]}
    queued = read_trials(study, states=(TrialState.WAITING,))
    assert [t.requeued_from for t in queued] == [0]
    assert not requeue(study, study.get_trials()[1]), "a re-queued config is re-queued once"


def test_a_dead_drivers_running_trial_can_be_told_from_another_process(tmp_path: Path) -> None:
    """Optuna has no public way back to a stored RUNNING trial; running_trial uses
    FrozenTrial._trial_id. A fresh Study object (a new driver) re-attaches and tells it."""
    study = _study(tmp_path)
    study.ask({"x": optuna.distributions.IntDistribution(0, 9)}).set_user_attr("partition", [0])
    again = optuna.load_study(study_name="w", storage=f"sqlite:///{tmp_path / 'w.db'}")
    (frozen,) = again.get_trials(states=(TrialState.RUNNING,))
    tell(again, running_trial(again, frozen), Verdict.stopped("interrupted"))
    (record,) = read_trials(study)
    assert record.state == TrialState.FAIL and record.error == "interrupted" and record.partition == (0,)


def test_evidence_stored_with_one_summary_field_reads_as_category_or_reason() -> None:
    """Before category and reason were apart, ``summary`` held a category, a signature or a sentence."""
    base = {"argv": ["x"], "elapsed_s": 1.0, "signature": "kv_cache_oom"}
    assert Evidence.from_dict({**base, "summary": "kv_cache_does_not_fit"}).category == "kv_cache_does_not_fit"
    assert Evidence.from_dict({**base, "summary": "kv_cache_oom"}) == Evidence(
        argv=("x",), elapsed_s=1.0, signature="kv_cache_oom"
    )
    said = Evidence.from_dict({**base, "summary": "predicted to fail"})
    assert said.reason == "predicted to fail" and said.category is None
