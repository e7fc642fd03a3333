"""What a study stores, owned in one place.

- :mod:`tuner.trials._record`: the one reader: :class:`TrialRecord` / :class:`StudyRecord`, frozen,
  built from Optuna's trials and the study's attrs.
- :mod:`tuner.trials._write`: the one writer: a trial's :class:`Verdict` through :func:`tell` (the
  only caller of ``study.tell``; :data:`STATES` maps every exception to a state), and every other
  attribute a trial or the study carries.
- :mod:`tuner.trials._keys`: the attribute names (no other module spells them).
"""

from tuner.trials._record import Kind, Studied, StudyRecord, TrialRecord, read_lease, read_study, read_trials, record_of
from tuner.trials._storage import connect
from tuner.trials._write import (
    HEADLINES,
    STARTS,
    STATES,
    Verdict,
    enqueue,
    grade,
    headline_metrics,
    keep_evidence,
    mark_launched,
    requeue,
    running_trial,
    save_confirmation,
    save_noise,
    save_noise_prior,
    save_revalidation,
    state_for,
    store_setup,
    tell,
    write_lease,
)

__all__ = [
    "HEADLINES",
    "STARTS",
    "STATES",
    "Kind",
    "Studied",
    "StudyRecord",
    "TrialRecord",
    "Verdict",
    "connect",
    "enqueue",
    "grade",
    "headline_metrics",
    "keep_evidence",
    "mark_launched",
    "read_lease",
    "read_study",
    "read_trials",
    "record_of",
    "requeue",
    "running_trial",
    "save_confirmation",
    "save_noise",
    "save_noise_prior",
    "save_revalidation",
    "state_for",
    "store_setup",
    "tell",
    "write_lease",
]
