"""The names under which a study stores what tuner keeps (Optuna user attrs). Only tuner.trials reads them."""

from __future__ import annotations

# study-level
SPACE = "tuner.space"
FINGERPRINT = "tuner.space_sha256"
SPACE_FILE = "tuner.space_file"
OBJECTIVES = "tuner.objectives"
NOISE = "noise"
NOISE_PRIOR = "tuner.noise_prior"  # the engine's fresh-server spread on this hardware, until the study measures its own
REVALIDATED = "revalidated"  # "revalidated.<trial number>"
CONFIRMED = "confirmed"  # "confirmed.<trial number>": its long run at its SLO answer (tuner.orchestration.confirm)
LEASE = "tuner.run_lease"

# trial-level: what it measured (a verdict)
METRICS = "metrics"
CAPACITY = "capacity"
TIMINGS = "timings"
LAUNCH = "launch"
TELEMETRY = "telemetry"
SLO = "slo"  # the SLO probe's levels, what each broke, why it stopped
NODE = "node"
HOST = "host"  # what it ran on: CPU, GPUs, driver, a core's speed (tuner.host.fingerprint)
ERROR = "error"
SIGNATURE = "signature"
EVIDENCE = "evidence"
# trial-level: how it came to be, and where it ran
INVALID = "invalid_combination"
SCREENED = "screened"
DUPLICATE_OF = "duplicate_of"
PARTITION = "partition"
LAUNCHED_AT = "launched_at"
ENQUEUED = "enqueued"
REQUEUED_FROM = "requeued_from"
RESCREEN_OF = "rescreen_of"

NOT_LAUNCHED = frozenset({SCREENED, DUPLICATE_OF, INVALID})
