"""Executors run trials on partitions and hand back futures of :class:`TrialOutcome`."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from tuner.partitions import Partition
from tuner.records import TrialOutcome
from tuner.space import SearchSpace
from tuner.trial import run_trial

__all__ = ["Executor", "InlineExecutor"]


class Executor(Protocol):
    """Runs :func:`tuner.trial.run_trial` for the driver; one trial per partition at a time."""

    partitions: list[Partition]

    def submit(self, space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition) -> Future[TrialOutcome]: ...

    def shutdown(self) -> None: ...


class InlineExecutor:
    """Runs each trial in the calling thread: one partition, Ctrl-C tears the server down."""

    def __init__(self, partitions: list[Partition]) -> None:
        self.partitions = partitions[:1]

    def submit(self, space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition) -> Future[TrialOutcome]:
        future: Future[TrialOutcome] = Future()
        try:
            future.set_result(run_trial(space, params, trial_dir, partition))
        except Exception as exc:  # noqa: BLE001 - the driver's record() classifies it
            future.set_exception(exc)
        return future

    def shutdown(self) -> None:
        pass
