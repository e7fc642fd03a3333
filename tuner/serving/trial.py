"""One trial, end to end: launch the server for a config, probe it, tear it down, return a record.

Runs in a worker (in-process or a Ray task); it never talks to Optuna and raises on failure.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner import engines, probes
from tuner.base import clock, progress
from tuner.base.artifacts import write_json
from tuner.base.exceptions import ConfigInfeasible, CrashedUnderLoad
from tuner.base.level import levels_in
from tuner.base.records import ProbeResult, Timings, TrialOutcome
from tuner.engines import Category, Command
from tuner.host import fingerprint, telemetry
from tuner.host.cores import pinned
from tuner.host.ledger import Ledger
from tuner.host.partitions import Partition
from tuner.probes import ServerHandle
from tuner.probes.capacity import read_capacity
from tuner.probes.load import MAX_ERROR_RATE, per_gpu
from tuner.serving.server import ServerProcess
from tuner.space import SearchSpace

__all__ = ["Served", "pinned", "run_trial", "serve"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """A ready server of one config: what probes reach, what was launched, how long it took."""

    handle: ServerHandle
    server: ServerProcess
    command: Command
    startup_s: float
    started_at: float


PORT_ATTEMPTS = 3  # starts of one trial when another program takes its port first
STOP_S = 30.0  # kept inside budget.trial_timeout for the server's stop and the outcome: the probes end before


@contextmanager
def serve(
    space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, *, ledger: Ledger | None = None
) -> Iterator[Served]:
    """Start ``params`` on ``partition``, wait until it really serves, and always end it.

    Writes command.txt and server.log. Raises :class:`~tuner.base.exceptions.ConfigInfeasible` (with
    evidence) when the server does not start."""
    adapter = engines.get(space.engine)
    model_path = adapter.resolve_model(space.model.path)
    api_key = os.environ.get(space.server.api_key_env) if space.server.api_key_env else None
    host = space.server.host
    trial_dir.mkdir(parents=True, exist_ok=True)
    port: int | None = None
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = partition.port(host, after=port)
        command = adapter.command(
            params, space=space, model_path=model_path, port=port, partition=partition, secrets=(api_key,) if api_key else ()
        )
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
            api_key=api_key,
        )
        progress.report("launching")
        server.start()
        try:
            startup_s = server.wait_ready()
            break
        except ConfigInfeasible as exc:
            server.stop()
            evidence = server.settled(exc.evidence)
            if evidence.category != Category.PORT_IN_USE or attempt == PORT_ATTEMPTS:
                raise type(exc)(str(exc), evidence=evidence) from None
            # free when the partition looked, taken before the engine bound it (another tuner's
            # trial, any program): the config is not at fault; the next free port of the block
            taken = trial_dir / f"server.port-{port}-taken.log"
            (trial_dir / "server.log").replace(taken)
            logger.warning("port %d was taken before the server bound it (%s): starting again on another", port, taken.name)
        except BaseException:
            server.stop()
            raise
    try:
        logger.info("ready after %.1fs: %s", startup_s, trial_dir)
        capacity = read_capacity(adapter, server.log_text(), server.url, headers=server.headers)
        handle = ServerHandle(
            server.url,
            adapter.served_model_name(model_path),
            capacity,
            api_key,
            adapter.prefix_cache_metrics,
            adapter.context_slack,
            adapter.cached_tokens_field,
            adapter.in_flight_source,
            trial_dir,
            adapter.fast_path(space.values(params)),
        )
        progress.report(f"ready after {startup_s:.0f}s")
        yield Served(handle, server, command, startup_s, started_at)
    finally:
        progress.report("stopping the server")
        server.stop()


def run_trial(
    space: SearchSpace, params: dict[str, Any], trial_dir: Path, partition: Partition, *, ledger: Ledger | None = None
) -> TrialOutcome:
    """Serve ``params`` on ``partition`` and measure it. Writes command.txt, server.log, outcome.json.

    Raises :class:`~tuner.base.exceptions.ConfigInfeasible` (with evidence) when the server does not
    start, :class:`~tuner.base.exceptions.ProbeError` when it cannot be measured."""
    adapter = engines.get(space.engine)
    host = fingerprint.this_host(partition.devices if partition.kind == "gpu" else (), partition.server_cpus)
    # written now: also where the trial never ends (a confirmation cut by a deadline)
    write_json(trial_dir / fingerprint.HOST_FILE, host.to_dict())
    limit = space.budget.trial_timeout
    with (
        progress.bind(trial_dir),
        clock.limit(None if limit is None else max(0.0, limit - STOP_S)),
        serve(space, params, trial_dir, partition, ledger=ledger) as served,
    ):
        probe_began = time.time()
        results: list[ProbeResult] = []
        sampler = telemetry.for_partition(partition.kind, partition.devices)
        try:
            with pinned(partition.client_cpus), sampler:
                for probe in probes.from_space(space):
                    probe.see(results)
                    results.append(probe.run(served.handle))
        except Exception as exc:
            crash = _crash(served.server, results, probe_began, failed=(probe.name, exc))
            if crash is not None:
                raise crash from None
            raise
        if (crash := _crash(served.server, results, probe_began)) is not None:
            raise crash
        if partition.kind == "gpu":
            results = [per_gpu(r, len(partition.devices)) for r in results]
        if (measured := _telemetry(sampler, results, space)) is not None:
            results.append(measured)
        probe_s = time.time() - probe_began
    command = served.command
    outcome = TrialOutcome(
        params=dict(params),
        argv=tuple(command.redact(a) for a in command.argv),
        capacity=served.handle.capacity,
        probes=tuple(results),
        timings=Timings(served.startup_s, probe_s, served.server.teardown_s, served.started_at, time.time()),
        log_path=str(served.server.log_path),
        engine_version=adapter.version(),
        env={k: command.redact(v) for k, v in command.env.items()},
        memory_cap=space.server.memory_cap,
        host=host.to_dict(),
    )
    write_json(trial_dir / "outcome.json", outcome.to_dict())
    return outcome


def _telemetry(sampler: telemetry.Telemetry, results: list[ProbeResult], space: SearchSpace) -> ProbeResult | None:
    """Power, energy and the rest per load level (see tuner.host.telemetry); None without a load probe."""
    load = next((r for r in results if r.probe == "load"), None)
    if load is None or space.probes.load is None:
        return None
    levels = levels_in(load.details)
    flat, per_level = telemetry.summarize_levels(sampler.samples, levels, space.probes.load.target_concurrency)
    windows = {name: list(level.window_at) if level.window_at else None for name, level in levels.items()}
    details = {"source": sampler.source, "levels": per_level, "trace": telemetry.trace(sampler.samples), "windows": windows}
    return ProbeResult("telemetry", flat, details)


SERVER_ERROR = re.compile(r"\bHTTP 5\d\d\b|RemoteProtocolError|ConnectError|ReadError|Server disconnected")


def _crash(
    server: ServerProcess, results: list[ProbeResult], began: float, *, failed: tuple[str, BaseException] | None = None
) -> CrashedUnderLoad | None:
    """The verdict on a server that died or answered only server errors while it was probed
    (PRUNED: the config crashed under load), with the evidence; None when it still serves."""
    first = _first_error(results, failed)
    died = server.died()
    measured = failed is None and any(  # the target level served, mostly without errors
        r.probe == "load" and "output_tok_s" in r.metrics and r.metrics.get("error_rate", 0.0) <= MAX_ERROR_RATE for r in results
    )
    if not died and (measured or first is None or not SERVER_ERROR.search(first["first_error"]) or not first["fatal"]):
        return None  # alive, and the target level measured: errors above it are the objective's constraints' business
    details: dict[str, Any] = {"probe_began_at": began, **(first or {})}
    evidence = server.failure_evidence(signature="crashed_under_load", details=details, since=began)
    where = (
        f" in {first['probe']}" + (f" at concurrency {first['concurrency']}" if first.get("concurrency") else "") if first else ""
    )
    what = "died" if server.died() else "answered only errors"  # after the evidence: it waited for an exit on its way
    return CrashedUnderLoad(f"the server {what} under load{where}: {evidence.describe()}", evidence=evidence)


def _first_error(results: list[ProbeResult], failed: tuple[str, BaseException] | None) -> dict[str, Any] | None:
    """The first failed request the probes saw: probe, level, message, seconds into the level's
    window; ``fatal`` when it stopped the probe (a level given up for errors, or the probe raised)."""
    for result in results:
        for name, level in levels_in(result.details).items():
            if level.first_error:
                return {
                    "probe": result.probe,
                    "concurrency": int(float(name)),
                    "first_error": level.first_error,
                    "first_error_at_s": level.first_error_at_s,
                    "error_rate": level.error_rate,
                    "fatal": "error rate" in str(result.details.get("stop_reason", "")),
                }
    if failed is not None:
        name, exc = failed
        return {"probe": name, "first_error": f"{type(exc).__name__}: {exc}"[:300], "fatal": True}
    return None
