"""Executors run :func:`tuner.serving.trial.run_trial` on a partition and hand back futures.

- :class:`RayExecutor` (default): each trial is a Ray task holding its partition's devices as
  custom resources (``tuner_device_<id>``) on a local Ray started and stopped here (dashboard
  off), or an existing cluster (``--ray-address``). On a cluster, a node that owns devices
  advertises them (``ray start --resources '{"tuner_device_0": 1, ...}'``), so each trial runs on
  the node that holds its partition (without such resources GPU trials ask Ray for ``num_gpus``).
  There the trial writes into a node-local directory whose files travel back to the driver's
  runs/ with the result, records its server in that node's own ledger, and checks that node's
  GPUs for foreign holders; every node's ledger is swept when an executor connects, so a crashed
  driver's rerun stops orphans on every node.
- :class:`InlineExecutor`: one trial at a time in the calling thread (tests, debugging).

Workers return plain records; only the driver talks to Optuna.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import tempfile
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from tuner.base.artifacts import write_json
from tuner.base.exceptions import InfrastructureError
from tuner.base.records import TrialOutcome
from tuner.host.ledger import Ledger
from tuner.host.partitions import Partition
from tuner.serving.trial import run_trial
from tuner.space import SearchSpace

__all__ = ["Executor", "InlineExecutor", "RayExecutor", "leftovers", "write_back"]

logger = logging.getLogger(__name__)

RAY_LABEL = "ray-local-cluster"
LEFTOVER_PREFIX = "tuner-trial-"  # a cluster trial's node-local folder
MARKER = ".tuner-trial.json"


class Executor(Protocol):
    """Runs trials for the driver. ``max_parallel`` bounds the trials in flight; ``recovered``
    says what it stopped of a crashed driver's at start, ``leftovers`` the files a lost trial's
    node kept (trial number -> name -> bytes; None where trials run here)."""

    max_parallel: int
    recovered: list[str]
    leftovers: dict[int, dict[str, bytes]] | None

    def submit(
        self, space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, ledger: Ledger | None
    ) -> Future[TrialOutcome]: ...

    def cancel(self, future: Future[TrialOutcome], *, force: bool) -> None: ...

    def shutdown(self) -> None: ...


class InlineExecutor:
    """Runs each trial in the calling thread: one at a time; Ctrl-C tears the server down."""

    max_parallel = 1

    def __init__(self) -> None:
        self.recovered: list[str] = []  # a crashed run's servers here: the driver's ledger stops them
        self.leftovers: dict[int, dict[str, bytes]] | None = None

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


MAX_SHIPPED_FILE = 64 * 2**20  # a file bigger than this stays on its node (its path is noted)


def node_ledger(key: str) -> Ledger:
    """This node's ledger of the servers it started for the study ``key`` (cluster mode)."""
    import ray

    base = Path(os.environ.get("TUNER_NODE_LEDGERS", Path(tempfile.gettempdir()) / "tuner-ledgers"))
    return Ledger(base / key / ray.get_runtime_context().get_node_id())


def _where() -> str:
    import ray

    return f"{socket.gethostname()} (ray node {ray.get_runtime_context().get_node_id()[:12]})"


def _remote_trial(
    space: dict[str, Any],
    params: dict[str, Any],
    trial_dir: str,
    partition: Partition,
    ledger: str | None,
    node_key: str | None = None,
) -> tuple[str, Any, dict[str, bytes] | None]:
    """Body of the Ray task. Errors travel back as values (our exceptions pickle with evidence).

    With ``node_key`` (a cluster) the trial runs in a node-local directory whose files are
    returned for the driver to write into ``trial_dir``; its server goes in this node's ledger."""
    import logging as _logging
    import signal as _signal

    _logging.getLogger("tuner").setLevel(_logging.INFO)
    try:  # Ray's soft cancel interrupts the task like SIGINT, which does nothing while SIGINT is
        # ignored, as it is inherited by a run started in the background (`tune run &` in a script)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
    except ValueError:
        pass  # not the worker's main thread: Ray cancels it another way
    local = Path(tempfile.mkdtemp(prefix=LEFTOVER_PREFIX)) if node_key else Path(trial_dir)
    if node_key:  # whose it is, should the driver die before the files travel back (swept by the next driver)
        write_json(local / MARKER, {"key": node_key, "trial": Path(trial_dir).name})
    book = node_ledger(node_key) if node_key else (Ledger(Path(ledger)) if ledger else None)
    try:
        if node_key:
            _refuse_held(partition)
        outcome = run_trial(SearchSpace.model_validate(space), params, local, partition, ledger=book)
        if node_key:
            outcome = dataclasses.replace(outcome, node=_where(), log_path=str(Path(trial_dir) / "server.log"))
            write_json(local / "outcome.json", outcome.to_dict())
        return "ok", outcome, _collect(local) if node_key else None
    except Exception as exc:  # noqa: BLE001 - classified by the driver
        return "error", exc, _collect(local) if node_key else None
    finally:
        if node_key:
            shutil.rmtree(local, ignore_errors=True)


def _refuse_held(partition: Partition) -> None:
    """GPU hygiene on the node that runs the trial: a foreign holder of its GPUs is named."""
    if partition.kind != "gpu":
        return
    from tuner.base.exceptions import InfrastructureError
    from tuner.host.devices import GpuHygiene

    hygiene = GpuHygiene(list(partition.devices))
    if hygiene.available and (holders := hygiene.held(partition.devices)):
        raise InfrastructureError(f"{_where()}: GPU(s) of this partition are held: " + ", ".join(map(str, holders)))


def _collect(root: Path) -> dict[str, bytes]:
    """The files under ``root`` (one beyond MAX_SHIPPED_FILE named, not shipped). A file gone
    between the listing and the read is left out: a killed driver's worker may still be tearing
    its trial folder down while the next driver sweeps (CI saw command.txt vanish there)."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != MARKER):
        rel = str(path.relative_to(root))
        try:
            size = path.stat().st_size
            files[rel] = path.read_bytes() if size <= MAX_SHIPPED_FILE else f"{size} bytes, left on {_where()}: {path}\n".encode()
        except FileNotFoundError:
            continue
    return files


def _sweep(key: str) -> tuple[list[str], dict[int, dict[str, bytes]]]:
    """Runs on one node: stop what that node's ledger still holds for study ``key``, and take
    the files its interrupted trials left (their driver died before they travelled back)."""
    book = node_ledger(key)
    notes = [
        f"{_where()}: stopped orphaned processes {', '.join(map(str, pids))} (group {e.pgid}, {e.argv0}) of {e.trial_dir}"
        for e, pids in book.stop_orphans()
    ]
    left = leftovers(key)
    notes += [f"{_where()}: took trial {n}'s files ({', '.join(sorted(files))}) left on this node" for n, files in left.items()]
    return notes, left


def leftovers(key: str, root: Path | None = None) -> dict[int, dict[str, bytes]]:
    """Files of study ``key``'s trials left in this node's temp folders (by trial number), which
    are removed once read. Only the study's lease holder sweeps, so none of them is running."""
    found: dict[int, dict[str, bytes]] = {}
    for folder in sorted((root or Path(tempfile.gettempdir())).glob(f"{LEFTOVER_PREFIX}*")):
        try:
            marker = json.loads((folder / MARKER).read_text())
        except (OSError, ValueError):
            continue
        if marker.get("key") != key or not str(marker.get("trial", "")).isdigit():
            continue
        found[int(marker["trial"])] = _collect(folder)
        shutil.rmtree(folder, ignore_errors=True)
    return found


def connection_problem(exc: BaseException) -> str:
    """Why ray.init could not join a cluster, in one line: authentication, version, reachability."""
    text = f"{type(exc).__name__}: {exc}"
    if "InvalidAuthToken" in text or "AuthenticationError" in text or ("auth" in text.lower() and "token" in text.lower()):
        return (
            "the cluster refused this driver's authentication token: set RAY_AUTH_MODE=token and the cluster's token "
            "(RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) as on its nodes"
        )
    if "version" in text.lower() and ("mismatch" in text.lower() or "differ" in text.lower()):
        return f"Ray or Python version differs from the cluster's ({text.splitlines()[0][:200]})"
    return f"could not connect ({text.splitlines()[0][:200]}): is the head's GCS port reachable and the cluster up?"


class RayExecutor:
    """Trials as Ray tasks; ``max_parallel`` is how many partitions of the smallest size fit."""

    def __init__(
        self,
        devices: list[int],
        kind: str,
        *,
        max_parallel: int,
        address: str | None = None,
        ledger: Ledger | None = None,
        node_key: str | None = None,
    ) -> None:
        import ray

        self._ray = ray
        self.kind = kind
        self.max_parallel = max_parallel
        self._local = address is None
        if ray.is_initialized():
            self._owned = False
        elif self._local:
            if not logger.isEnabledFor(logging.INFO):  # -v shows it: the token auth Ray turns on for the tool's own cluster
                logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
            ray.init(
                address="local",  # always a new cluster of our own: never a stray /tmp/ray/ray_current_cluster or RAY_ADDRESS
                # Ray prestarts a Python worker per CPU it is given; trials ask for their devices and
                # no CPU (see _options), so one worker per trial that can run at once is all it needs
                # (os.cpu_count() here prestarted 2 workers per 1-partition run on 2 cores, 128 on a GPU box)
                num_cpus=max_parallel,
                num_gpus=0,
                resources={f"tuner_device_{d}": 1.0 for d in devices},
                include_dashboard=False,
                log_to_driver=False,
                namespace="tuner",
                logging_level=logging.WARNING,
            )
            self._owned = True
        else:
            try:
                ray.init(address=address, namespace="tuner", log_to_driver=False, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise InfrastructureError(f"--ray-address {address}: {connection_problem(exc)}") from exc
            self._owned = True
        self._task = ray.remote(max_retries=0)(_remote_trial)
        self._refs: dict[Future[TrialOutcome], Any] = {}
        # A local cluster's processes outlive a SIGKILLed driver: record them for the next run.
        self._ledger = ledger if self._owned and self._local else None
        self._record_cluster()
        resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
        self._by_device = self._local or all(f"tuner_device_{d}" in resources for d in devices)
        self.node_key = None if self._local else (node_key or "default")
        # trial number -> files its node kept (see tuner.orchestration.driver.fail_interrupted)
        self._kept: dict[int, dict[str, bytes]] = {}
        self.leftovers: dict[int, dict[str, bytes]] | None = self._kept
        self.recovered = self.sweep_nodes() if self.node_key else []

    def sweep_nodes(self) -> list[str]:
        """Stop, on every alive node, what its ledger still holds of this study (a crashed driver's servers)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        key = self.node_key
        if key is None:  # a local cluster: its nodes hold nothing of another driver's
            return []
        sweep = self._ray.remote(num_cpus=0, max_retries=0)(_sweep)
        refs = [
            sweep.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(key)
            for node in self._ray.nodes()  # type: ignore[no-untyped-call]
            if node.get("Alive")
        ]
        notes: list[str] = []
        for found, left in self._ray.get(refs):
            notes += found
            self._kept.update(left)
        return notes

    def _record_cluster(self) -> None:
        if self._ledger is not None:
            self._ledger.add_tree(os.getpid(), RAY_LABEL)

    def _options(self, partition: Partition) -> dict[str, Any]:
        if self._by_device:
            return {"num_cpus": 0, "resources": {f"tuner_device_{d}": 1.0 for d in partition.devices}}
        if self.kind == "gpu":
            return {"num_cpus": 1, "num_gpus": len(partition.devices)}
        return {"num_cpus": len(partition.devices)}

    def submit(
        self, space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, ledger: Ledger | None = None
    ) -> Future[TrialOutcome]:
        self._record_cluster()  # agents Ray starts lazily
        ref = self._task.options(**self._options(partition)).remote(
            space.model_dump(mode="json"),
            params,
            str(trial_dir.resolve()),
            partition,
            str(ledger.root.resolve()) if ledger else None,
            self.node_key,
        )
        result: Future[TrialOutcome] = Future()
        self._refs[result] = ref

        def unpack(done: Future[tuple[str, Any, dict[str, bytes]]]) -> None:
            self._refs.pop(result, None)
            try:
                kind, value, files = done.result()
                if files:
                    write_back(trial_dir, files)
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


def write_back(trial_dir: Path, files: dict[str, bytes]) -> None:
    """A cluster trial's files, written into the driver's runs/ as if the trial had run here."""
    for rel, data in files.items():
        path = trial_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _infrastructure(exc: BaseException) -> BaseException:
    from tuner.base.exceptions import InfrastructureError

    return InfrastructureError(f"ray: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
