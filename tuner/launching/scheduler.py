"""Launching servers on partitions, with the same hygiene for every launch: the search's trials
(:class:`tuner.orchestration.driver.Driver`) and the re-measurements on fresh servers
(:func:`tuner.orchestration.validate.remeasure`).

- a partition whose GPUs some process holds before the launch is refused and quarantined;
- a job past its time limit is cancelled (forced) and what the ledger holds of it is stopped; a
  launch may bring a shorter limit of its own (what a run's deadline leaves it), which its trial's
  probes see as ``budget.trial_timeout`` (:mod:`tuner.base.clock`);
- a stop cancels every job (its own teardown first, then forced) and sweeps the ledger;
- a partition comes back to the pool only once its GPUs' memory is back near the baseline.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.base.records import TrialOutcome
from tuner.host.devices import GpuHygiene
from tuner.host.ledger import Ledger
from tuner.host.partitions import Partition, PartitionPool, trial_size
from tuner.launching.executors import Executor
from tuner.space import SearchSpace

__all__ = ["Job", "Scheduler"]

logger = logging.getLogger(__name__)


@dataclass
class Job:
    """One launch in flight: ``key`` is the caller's (a trial, a re-measurement's label and run);
    ``limit``: the seconds it may run (None: no limit), ``limit_from`` what set it where not the
    scheduler's own limit."""

    key: Any
    partition: Partition
    trial_dir: Path
    began: float
    timed_out: bool = False
    limit: float | None = None
    limit_from: str = ""


class Scheduler:
    """Jobs on free partitions through ``executor``; see the module docstring for the hygiene."""

    def __init__(
        self,
        space: SearchSpace,
        executor: Executor,
        ledger: Ledger,
        *,
        hygiene: GpuHygiene | None = None,
        time_limit: float | None = None,
    ) -> None:
        self.space = space
        self.executor = executor
        self.ledger = ledger
        self.hygiene = hygiene
        self.time_limit = time_limit
        hw = space.hardware
        self.pool = PartitionPool(hw.kind, hw.devices)
        self.running: dict[Future[TrialOutcome], Job] = {}
        self.refusals: list[str] = []
        self.launching: Job | None = None  # between taking a partition and the executor's future
        self.stop_reason = ""  # set by request_stop (a signal handler, a lost lease): callers stop launching

    def request_stop(self, reason: str) -> None:
        """Launch nothing more; the caller then stops what runs (:meth:`stop`). Safe from a signal handler."""
        self.stop_reason = self.stop_reason or reason

    @property
    def max_parallel(self) -> int:
        return self.executor.max_parallel

    def size(self, params: Mapping[str, Any]) -> int:
        return trial_size(self.space.hardware.per_trial, dict(params))

    def launch(
        self,
        key: Any,
        params: Mapping[str, Any],
        trial_dir: Path,
        *,
        on_partition: Callable[[Partition], None] | None = None,
        limit: tuple[float, str] | None = None,
    ) -> Job | None:
        """Start ``params`` on a free partition of its size; None when none is free (or every free
        one is refused). ``on_partition`` runs once the partition is taken, before the launch.
        ``limit``: seconds and what sets them (``"budget.deadline"``), where shorter than the
        scheduler's own limit: the job is stopped there, and its trial runs with that
        ``budget.trial_timeout``, so that its probes end before it."""
        partition = self.pool.acquire(self.size(params))
        while partition is not None and self._refused(partition):
            partition = self.pool.acquire(self.size(params))  # the next free one; the refused one is quarantined
        if partition is None:
            return None
        if on_partition is not None:
            on_partition(partition)
        job = Job(key, partition, trial_dir, time.monotonic(), limit=self.time_limit)
        space = self.space
        if limit is not None and (self.time_limit is None or limit[0] < self.time_limit):
            job.limit, job.limit_from = max(0.0, limit[0]), limit[1]
            space = space.model_copy(update={"budget": space.budget.model_copy(update={"trial_timeout": job.limit})})
        self.launching = job
        future = self.executor.submit(space, dict(params), trial_dir, partition, self.ledger)
        self.running[future] = job
        self.launching = None
        return job

    def _refused(self, partition: Partition) -> bool:
        """A partition whose GPUs some process holds before the launch is refused (quarantined)."""
        if self.hygiene is None or not self.hygiene.available:
            return False
        holders = self.hygiene.held(partition.devices)
        if not holders:
            return False
        self.pool.release(partition)
        self.pool.quarantine(partition)
        held = ", ".join(h.describe() for h in holders)
        self.refusals.append(f"{partition.describe()} refused: memory held before the trial by {held}")
        logger.error("%s", self.refusals[-1])
        return True

    def wait(self, timeout: float | None = None) -> list[tuple[Future[TrialOutcome], Job]]:
        """The jobs that ended within ``timeout`` (their partitions released), after enforcing the time limit."""
        if not self.running:
            return []
        done, _ = wait(list(self.running), timeout=timeout, return_when=FIRST_COMPLETED)
        ended = []
        for future in done:
            job = self.running.pop(future)
            self.release(job.partition)
            ended.append((future, job))
        self.enforce_time_limit()
        return ended

    def enforce_time_limit(self) -> None:
        now = time.monotonic()
        for future, job in list(self.running.items()):
            if job.limit is not None and not job.timed_out and now - job.began > job.limit:
                job.timed_out = True
                why = f" ({job.limit_from})" if job.limit_from else ""
                logger.warning("%s passed its %.0fs limit%s: stopping it", job.trial_dir, job.limit, why)
                self.executor.cancel(future, force=True)
                self.sweep(job)

    def sweep(self, job: Job) -> None:
        """Stop whatever the ledger still holds of ``job`` (its worker was cancelled)."""
        self.ledger.stop_orphans(self.ledger.for_trial(job.trial_dir))

    def stop(self, grace: float = 20.0) -> dict[Future[TrialOutcome], Job]:
        """Ask every job to stop (its own teardown runs), then force, then sweep the ledger; the
        jobs are returned, still marked running, for the caller to record (partitions released)."""
        for future in list(self.running):
            self.executor.cancel(future, force=False)
        done, _ = wait(list(self.running), timeout=grace)
        for future in list(self.running):
            if future not in done:
                self.executor.cancel(future, force=True)
        for job in self.running.values():
            self.sweep(job)
        stopped = dict(self.running)
        for job in stopped.values():
            self.pool.release(job.partition)
        self.running.clear()
        return stopped

    def abandon(self) -> list[Job]:
        """An exception left the caller's loop: every job in flight, and the one being launched,
        handed back for the caller to record; their partitions go back through :meth:`release`
        (the GPU-memory check included) and nothing is running any more."""
        jobs = list(self.running.values())
        if self.launching is not None:
            jobs.append(self.launching)
        for job in self.running.values():
            self.release(job.partition)
        self.running.clear()
        self.launching = None
        return jobs

    def release(self, partition: Partition) -> None:
        """Return a partition to the pool once its GPUs' memory is back near the baseline."""
        self.pool.release(partition)
        if self.hygiene is not None and self.hygiene.available:
            excess = self.hygiene.settle(partition.devices)
            if excess:
                self.pool.quarantine(partition)
                held = ", ".join(f"GPU {d}: {mib:.0f} MiB" for d, mib in excess.items())
                logger.error("quarantined %s: memory not released after the trial (%s)", partition.describe(), held)
