"""Executors run :func:`tuner.trial.run_trial` on a partition and hand back futures.

- :class:`RayExecutor` (default): each trial is a Ray task holding its partition's devices as
  custom resources (``tuner_device_<id>``) on a local Ray started and stopped here (dashboard
  off), or an existing cluster (``--ray-address``) where GPU trials ask Ray for ``num_gpus``.
- :class:`InlineExecutor`: one trial at a time in the calling thread (tests, debugging).

Workers return plain records; only the driver talks to Optuna.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from tuner.ledger import Ledger
from tuner.partitions import Partition
from tuner.records import TrialOutcome
from tuner.space import SearchSpace
from tuner.trial import run_trial

__all__ = ["Executor", "InlineExecutor", "RayExecutor"]

logger = logging.getLogger(__name__)

RAY_LABEL = "ray-local-cluster"


class Executor(Protocol):
    """Runs trials for the driver. ``max_parallel`` bounds the trials in flight."""

    max_parallel: int

    def submit(
        self, space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, ledger: Ledger | None
    ) -> Future[TrialOutcome]: ...

    def cancel(self, future: Future[TrialOutcome], *, force: bool) -> None: ...

    def shutdown(self) -> None: ...


class InlineExecutor:
    """Runs each trial in the calling thread: one at a time; Ctrl-C tears the server down."""

    max_parallel = 1

    def submit(
        self, space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, ledger: Ledger | None = None
    ) -> Future[TrialOutcome]:
        future: Future[TrialOutcome] = Future()
        try:
            future.set_result(run_trial(space, params, trial_dir, partition, ledger=ledger))
        except Exception as exc:  # noqa: BLE001 - the driver's record() classifies it
            future.set_exception(exc)
        return future

    def cancel(self, future: Future[TrialOutcome], *, force: bool) -> None:
        pass

    def shutdown(self) -> None:
        pass


def _remote_trial(space: dict[str, Any], params: dict[str, Any], trial_dir: str, partition: Partition, ledger: str | None) -> tuple[str, Any]:
    """Body of the Ray task. Errors travel back as values (our exceptions pickle with evidence)."""
    import logging as _logging
    import signal as _signal

    _logging.getLogger("tuner").setLevel(_logging.INFO)
    try:  # Ray's soft cancel interrupts the task like SIGINT, which does nothing while SIGINT is
        # ignored, as it is inherited by a run started in the background (`tune run &` in a script)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    except ValueError:
        pass  # not the worker's main thread: Ray cancels it another way
    try:
        outcome = run_trial(
            SearchSpace.model_validate(space), params, Path(trial_dir), partition, ledger=Ledger(Path(ledger)) if ledger else None
        )
        return "ok", outcome
    except Exception as exc:  # noqa: BLE001 - classified by the driver
        return "error", exc


class RayExecutor:
    """Trials as Ray tasks; ``max_parallel`` is how many partitions of the smallest size fit."""

    def __init__(
        self, devices: list[int], kind: str, *, max_parallel: int, address: str | None = None, ledger: Ledger | None = None
    ) -> None:
        import ray

        self._ray = ray
        self.kind = kind
        self.max_parallel = max_parallel
        self._local = address is None
        if ray.is_initialized():
            self._owned = False
        elif self._local:
            ray.init(
                num_cpus=max(os.cpu_count() or 1, max_parallel),
                num_gpus=0,
                resources={f"tuner_device_{d}": 1.0 for d in devices},
                include_dashboard=False,
                log_to_driver=False,
                namespace="tuner",
                logging_level=logging.WARNING,
            )
            self._owned = True
        else:
            ray.init(address=address, namespace="tuner", log_to_driver=False, logging_level=logging.WARNING)
            self._owned = True
        self._task = ray.remote(max_retries=0)(_remote_trial)
        self._refs: dict[Future[TrialOutcome], Any] = {}
        # A local cluster's processes outlive a SIGKILLed driver: record them for the next run.
        self._ledger = ledger if self._owned and self._local else None
        self._record_cluster()

    def _record_cluster(self) -> None:
        if self._ledger is not None:
            self._ledger.add_tree(os.getpid(), RAY_LABEL)

    def _options(self, partition: Partition) -> dict[str, Any]:
        if self._local:
            return {"num_cpus": 0, "resources": {f"tuner_device_{d}": 1.0 for d in partition.devices}}
        if self.kind == "gpu":
            return {"num_cpus": 1, "num_gpus": len(partition.devices)}
        return {"num_cpus": len(partition.devices)}

    def submit(
        self, space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, ledger: Ledger | None = None
    ) -> Future[TrialOutcome]:
        self._record_cluster()  # agents Ray starts lazily
        ref = self._task.options(**self._options(partition)).remote(
            space.model_dump(mode="json"), params, str(trial_dir.resolve()), partition, str(ledger.root.resolve()) if ledger else None
        )
        result: Future[TrialOutcome] = Future()
        self._refs[result] = ref

        def unpack(done: Future[tuple[str, Any]]) -> None:
            self._refs.pop(result, None)
            try:
                kind, value = done.result()
            except BaseException as exc:  # noqa: BLE001 - a lost worker, a cancelled task
                result.set_exception(_infrastructure(exc))
                return
            if kind == "ok":
                result.set_result(value)
            else:
                result.set_exception(value)

        ref.future().add_done_callback(unpack)
        return result

    def cancel(self, future: Future[TrialOutcome], *, force: bool) -> None:
        ref = self._refs.get(future)
        if ref is not None:
            self._ray.cancel(ref, force=force)

    def shutdown(self) -> None:
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
        if self._ledger is not None:
            self._ledger.stop_orphans(self._ledger.labelled(RAY_LABEL))


def _infrastructure(exc: BaseException) -> BaseException:
    from tuner.exceptions import InfrastructureError

    return InfrastructureError(f"ray: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
