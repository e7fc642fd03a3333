"""One trial, end to end: launch the server for a config, probe it, tear it down, return a record.

Runs in a worker (in-process or a Ray task); it never talks to Optuna and raises on failure.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner import engines, probes
from tuner.artifacts import write_json
from tuner.exceptions import ConfigInfeasible
from tuner.ledger import Ledger
from tuner.partitions import Partition
from tuner.engines import Command
from tuner.probes import ServerHandle
from tuner.probes.capacity import read_capacity
from tuner.records import Timings, TrialOutcome
from tuner.server import ServerProcess
from tuner.space import SearchSpace

__all__ = ["Served", "pinned", "run_trial", "serve"]

logger = logging.getLogger(__name__)


@contextmanager
def pinned(cores: tuple[int, ...]) -> Iterator[None]:
    """Run the load client on its partition's own cores (GPU partitions), then restore."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@dataclass(frozen=True)
class Served:
    """A ready server of one config: what probes reach, what was launched, how long it took."""

    handle: ServerHandle
    server: ServerProcess
    command: Command
    startup_s: float
    started_at: float


@contextmanager
def serve(
    space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, *, ledger: Ledger | None = None
) -> Iterator[Served]:
    """Start ``params`` on ``partition``, wait until it really serves, and always end it.

    Writes command.txt and server.log. Raises :class:`~tuner.exceptions.ConfigInfeasible` (with
    evidence) when the server does not start."""
    adapter = engines.get(space.engine)
    model_path = adapter.resolve_model(space.model.path)
    api_key = os.environ.get(space.server.api_key_env) if space.server.api_key_env else None
    host = space.server.host
    port = partition.port(host)
    command = adapter.command(
        params, space=space, model_path=model_path, port=port, partition=partition, secrets=(api_key,) if api_key else ()
    )
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "command.txt").write_text(command.shell_line() + "\n")
    started_at = time.time()
    server = ServerProcess(
        command,
        adapter=adapter,
        log_path=trial_dir / "server.log",
        host=host,
        port=port,
        model=model_path,
        startup_timeout=space.server.startup_timeout,
        memory_cap=space.server.memory_cap,
        ledger=ledger,
    )
    server.start()
    try:
        try:
            startup_s = server.wait_ready()
        except ConfigInfeasible as exc:
            server.stop()
            raise type(exc)(str(exc), evidence=server.settled(exc.evidence)) from None
        logger.info("ready after %.1fs: %s", startup_s, trial_dir)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        capacity = read_capacity(adapter, server.log_text(), server.url, headers=headers)
        handle = ServerHandle(
            server.url, adapter.served_model_name(model_path), capacity, adapter.name, api_key, adapter.prefix_cache_metrics
        )
        yield Served(handle, server, command, startup_s, started_at)
    finally:
        server.stop()


def run_trial(
    space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, *, ledger: Ledger | None = None
) -> TrialOutcome:
    """Serve ``params`` on ``partition`` and measure it. Writes command.txt, server.log, outcome.json.

    Raises :class:`~tuner.exceptions.ConfigInfeasible` (with evidence) when the server does not
    start, :class:`~tuner.exceptions.ProbeError` when it cannot be measured."""
    adapter = engines.get(space.engine)
    with serve(space, params, trial_dir, partition, ledger=ledger) as served:
        probe_began = time.monotonic()
        with pinned(partition.client_cpus):
            results = tuple(probe.run(served.handle) for probe in probes.from_space(space))
        probe_s = time.monotonic() - probe_began
    command = served.command
    outcome = TrialOutcome(
        params=dict(params),
        argv=tuple(command.redact(a) for a in command.argv),
        capacity=served.handle.capacity,
        probes=results,
        timings=Timings(served.startup_s, probe_s, served.server.teardown_s, served.started_at, time.time()),
        log_path=str(served.server.log_path),
        engine_version=adapter.version(),
    )
    write_json(trial_dir / "outcome.json", outcome.to_dict())
    return outcome
