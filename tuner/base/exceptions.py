"""The exception tree of tuner.

Everything below the driver raises; exactly one function
(:func:`tuner.trials.state_for`, one table) turns these into Optuna trial states.

    TunerError
    ├── ConfigError                 bad input: a space, an objective, a CLI value (exit code 2)
    │   └── SpaceError              a search-space file; names the file and the key path
    ├── ProvisionError              an engine or model could not be installed or found
    ├── ConfigInfeasible            the config cannot run at all (trial PRUNED)
    │   ├── StartupFailed           the server died or logged a fatal line before it was ready
    │   ├── StartupTimeout          the server never became ready within the startup timeout
    │   ├── TrialTimeout            the whole trial outran its wall-clock limit
    │   ├── CrashedUnderLoad        the server died, or answered only errors, while it was probed
    │   └── ScreenedOut             the pre-screen predicted a failure; nothing was launched
    ├── InvalidCombination          the params break one of the space's constraints (trial PRUNED, never launched)
    ├── ProbeError                  a probe could not produce a measurement (trial FAIL)
    ├── TeardownError               a process of the server's group outlived the teardown
    └── InfrastructureError         not the config's fault: disk, Ray, lost worker (trial FAIL, retried)

Errors that concern a launched server carry an :class:`~tuner.base.evidence.Evidence`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from tuner.base.evidence import Evidence

__all__ = [
    "ConfigError",
    "ConfigInfeasible",
    "CrashedUnderLoad",
    "InfrastructureError",
    "InvalidCombination",
    "ProbeError",
    "ProvisionError",
    "ScreenedOut",
    "SpaceError",
    "StartupFailed",
    "StartupTimeout",
    "TeardownError",
    "TrialTimeout",
    "TunerError",
]


class TunerError(Exception):
    """Base of every error tuner raises on purpose."""


class ConfigError(TunerError):
    """Bad user input. The message is one line, ready to print."""


class SpaceError(ConfigError):
    """A search-space file is invalid.

    ``str()`` is ``"<file>: <key.path>: <problem>"``.
    """

    def __init__(self, path: str, key: str, problem: str) -> None:
        self.path = path
        self.key = key
        self.problem = problem
        super().__init__(f"{path}: {key}: {problem}" if key else f"{path}: {problem}")

    def __reduce__(self) -> tuple[type[SpaceError], tuple[str, str, str]]:
        return type(self), (self.path, self.key, self.problem)


class ProvisionError(TunerError):
    """An engine binary or a model could not be installed or found."""


class _WithEvidence(TunerError):
    def __init__(self, message: str, *, evidence: Evidence) -> None:
        super().__init__(message)
        self.evidence = evidence

    def __reduce__(self) -> tuple[Callable[..., _WithEvidence], tuple[type[_WithEvidence], str, Evidence]]:
        # keyword-only evidence: pickle (Ray, multiprocessing) must pass it back by name
        return _rebuild, (type(self), str(self), self.evidence)


def _rebuild(cls: type[_WithEvidence], message: str, evidence: Evidence) -> _WithEvidence:
    return cls(message, evidence=evidence)


def describe_failure(exc: BaseException) -> str:
    """What a failed run says: its evidence's description where it carries one, else its type and message."""
    evidence = getattr(exc, "evidence", None)
    return evidence.describe() if evidence is not None else f"{type(exc).__name__}: {exc}"


class ConfigInfeasible(_WithEvidence):
    """The configuration cannot serve; the evidence says why."""


class StartupFailed(ConfigInfeasible):
    """The server exited, or logged a fatal line, before it was ready."""


class StartupTimeout(ConfigInfeasible):
    """The server did not become ready within the startup timeout."""


class TrialTimeout(ConfigInfeasible):
    """The trial (startup and probes) outran its wall-clock limit; its server was stopped."""


class CrashedUnderLoad(ConfigInfeasible):
    """The server started but died, or answered server errors, under the probes' load (the
    config crashed: raised max-running-requests and the service never came back)."""


class ScreenedOut(ConfigInfeasible):
    """The pre-screen predicted that this config cannot start; nothing was launched."""


class InvalidCombination(TunerError):
    """The params break one of the space's constraints: the config is never launched."""


class ProbeError(_WithEvidence):
    """A probe could not measure the running server."""

    def __init__(self, message: str, *, evidence: Evidence | None = None) -> None:
        if evidence is None:
            from tuner.base.evidence import Evidence

            evidence = Evidence(argv=(), elapsed_s=0.0, signature="probe_error", reason=message)
        super().__init__(message, evidence=evidence)


class TeardownError(_WithEvidence):
    """A process of the server's group was still alive after TERM and KILL."""


class InfrastructureError(TunerError):
    """A fault of the machinery around the trial, not of the config."""
