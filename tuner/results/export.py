"""Export a chosen trial as a serve config: shell command, YAML, systemd unit, JSON.

What is exported is what ran: the argv, environment, engine version and memory cap recorded when
the trial launched (the trial's ``launch`` attr; for studies older than that record, the trial's
``outcome.json`` and ``command.txt`` in its run directory), with only the port replaced. The
exporting machine's adapter is consulted only to say where it differs (another engine version,
other flag spellings); a trial with no record at all is re-rendered here, and says so. Secrets
never appear: environment values that are secrets are left out and named, with the
EnvironmentFile a unit reads them from.
"""

from __future__ import annotations

import gzip
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tuner import engines
from tuner.base.metrics import CAPACITY_CONTEXT_PER_REQUEST, CAPACITY_KV_TOKENS, LOAD_ERROR_RATE, LOAD_TTFT_P99
from tuner.engines import Command
from tuner.results.confirmation import corrected, describe_answer, other_host
from tuner.results.limits import Limits, default_contexts, for_trial
from tuner.results.pick import Candidate
from tuner.space import SearchSpace
from tuner.trials import Studied, TrialRecord, record_of

__all__ = ["FORMATS", "Export", "Launch", "build_export", "recorded_launch"]

FORMATS = ("cmd", "yaml", "systemd", "json")
PORT_FLAGS = ("--port",)


@dataclass(frozen=True)
class Launch:
    """What one trial launched: argv (interpreter, pinning and flags as they ran), environment
    additions (secrets as ``***``), the engine version measured there, the memory cap; ``source``
    says where the record came from."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    engine_version: str | None = None
    memory_cap: int | None = None
    source: str = "study"


def recorded_launch(trial: TrialRecord, adapter: engines.EngineAdapter, run_dir: Path | None = None) -> Launch | None:
    """The trial's launch record, else (older studies) the trial's outcome.json and command.txt
    under ``run_dir``; None where neither exists."""
    data = trial.launch
    if data:
        return Launch(tuple(data["argv"]), dict(data.get("env") or {}), data.get("engine_version"), data.get("memory_cap"))
    if run_dir is None:
        return None
    source = trial.source
    outcome = run_dir / "trials" / str(source) / "outcome.json"
    if not outcome.is_file():
        return None
    data = json.loads(outcome.read_text())
    env = dict(data.get("env") or {})
    line = run_dir / "trials" / str(source) / "command.txt"
    if not env and line.is_file():  # the shell line's leading NAME=value words
        for word in shlex.split(line.read_text()):
            if "=" not in word or word.startswith("-"):
                break
            name, value = word.split("=", 1)
            env[name] = value
    version = data.get("engine_version") or _version_in_log(adapter, run_dir / "trials" / str(source))
    return Launch(tuple(data["argv"]), env, version, data.get("memory_cap"), source=str(outcome))


def _version_in_log(adapter: engines.EngineAdapter, trial_dir: Path) -> str | None:
    """The engine version the server printed, as its adapter reads it."""
    for name in ("server.log", "server.log.gz"):
        path = trial_dir / name
        if path.is_file():
            text = (
                gzip.decompress(path.read_bytes()).decode(errors="replace")
                if name.endswith(".gz")
                else path.read_text(errors="replace")
            )
            if found := adapter.logged_version(text):
                return found
    return None


def _with_port(argv: tuple[str, ...], port: int) -> tuple[str, ...]:
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg in PORT_FLAGS:
            out[i + 1] = str(port)
    return tuple(out)


def _flags(argv: tuple[str, ...], listen: tuple[str, ...]) -> list[str]:
    """The engine flags of an argv (after any taskset pinning and the executable), without the
    adapter's ``listen`` flags (host and ports)."""
    if argv[:1] == ("taskset",):
        argv = argv[3:]
    start = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    words, skip = [], False
    for word in argv[start:]:
        if skip:
            skip = False
            continue
        if word in listen:
            skip = True
            continue
        words.append(word)
    return words


@dataclass(frozen=True)
class Export:
    study: str
    candidate: Candidate
    space: SearchSpace
    command: Command
    secret_env: tuple[str, ...]
    limits: Limits
    engine_version: str | None
    metric_names: list[str]
    memory_cap: int | None = None
    notes: tuple[str, ...] = ()  # how the export relates to what ran (recorded, other version, re-rendered)

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.candidate.trial.params)

    def warnings(self) -> list[str]:
        notes = list(self.notes)
        if not self.candidate.revalidated:
            notes.append(f"trial {self.candidate.number} was never re-validated (run `tune validate --study {self.study}`)")
        notes += self._confirmation_notes()
        notes += [w for w in self.limits.warnings() if "recall was verified" in w or "served" in w]
        if self.limits.queue_unbounded:
            notes.append("its queue is unbounded: under overload requests wait instead of being rejected")
        return notes

    def _confirmation_notes(self) -> list[str]:
        """An SLO answer from short windows only, or one its long run did not hold, is said so."""
        if self.space.probes.slo is None:
            return []
        found, n = self.candidate.trial.confirmed, self.candidate.number
        moved = other_host(self.candidate.trial.host, found, n)
        return [*self._confirmation_verdict(found, n), *([moved] if moved else [])]

    def _confirmation_verdict(self, found: Mapping[str, Any] | None, n: int) -> list[str]:
        if not found:
            return [
                f"trial {n}'s SLO answer is not confirmed: it comes from short windows (`tune validate --study {self.study} "
                "--confirm` runs it for 10 minutes at that load on a fresh server)"
            ]
        if found.get("failure"):
            return [f"trial {n}'s confirmation run gave no result: {found['failure']}"]
        if not found.get("held") and (kept := corrected(found)) is not None:
            return [
                f"trial {n}'s SLO answer is the load its confirmation found to hold ({describe_answer(kept)}), "
                f"below the search's {describe_answer(found.get('answer') or {})}, which did not hold"
            ]
        if not found.get("held"):
            return [f"trial {n} did NOT hold the SLO throughout its {found.get('seconds', 0) / 60:.0f}-minute confirmation run"]
        return []

    def figures(self) -> list[str]:
        metrics = self.candidate.trial.metrics
        lines = [f"{name}: {value:,.1f}" for name, value in zip(self.metric_names, self.candidate.values, strict=False)]
        for key in (LOAD_TTFT_P99, LOAD_ERROR_RATE, CAPACITY_KV_TOKENS, CAPACITY_CONTEXT_PER_REQUEST):
            if key in metrics and key not in self.metric_names:
                lines.append(f"{key}: {metrics[key]:,.3f}")
        return lines

    def render(self, fmt: str) -> str:
        return {"cmd": self._cmd, "yaml": self._yaml, "systemd": self._systemd, "json": self._json}[fmt]()

    def _public_env(self) -> dict[str, str]:
        return {k: v for k, v in self.command.env.items() if k not in self.secret_env}

    def _argv(self) -> list[str]:
        """The recorded argv, under the memory cap it ran with (prlimit) where it had one."""
        cap = ["prlimit", f"--as={self.memory_cap}", "--"] if self.memory_cap else []
        return [*cap, *self.command.argv]

    def _cmd(self) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in self._public_env().items()]
        return " ".join([*env, *map(shlex.quote, self._argv())]) + "\n"

    def _yaml(self) -> str:
        flags = self.space.values(self.params)
        doc: dict[str, Any] = {
            "engine": self.space.engine,
            "model": self.space.model.path,
            "flags": flags,
            "env": self._public_env(),
            "argv": list(self.command.argv),
            "engine_version": self.engine_version,
            "memory_cap": self.memory_cap,
            "from": {"study": self.study, "trial": self.candidate.number, "workload": self.space.describe_workload()},
        }
        own = engines.get(self.space.engine).config_file(flags)  # the engine's own file, where it reads one
        return yaml.safe_dump(doc if own is None else own, sort_keys=False)

    def _json(self) -> str:
        return (
            json.dumps(
                {
                    "engine": self.space.engine,
                    "engine_version": self.engine_version,
                    "argv": list(self.command.argv),
                    "env": self._public_env(),
                    "memory_cap": self.memory_cap,
                    "secret_env": list(self.secret_env),
                    "params": self.params,
                    "study": self.study,
                    "trial": self.candidate.number,
                    "workload": self.space.describe_workload(),
                    "values": dict(zip(self.metric_names, self.candidate.values, strict=False)),
                    "revalidated": self.candidate.revalidated,
                    "confirmed": _confirmed_summary(self.candidate.trial.confirmed),
                    "host": self.candidate.trial.host,  # what the trial ran on (tuner.host.fingerprint)
                    "limits": self.limits.to_dict(default_contexts(self.limits)),
                    "warnings": self.warnings(),
                },
                indent=2,
            )
            + "\n"
        )

    def _systemd(self) -> str:
        name = f"tuner-{self.study}"
        comment = [
            f"# {name}.service: exported by `tune export` from study {self.study!r}, trial {self.candidate.number}",
            f"# engine: {self.space.engine} {self.engine_version or '(version unknown)'}",
            *(
                f"# tuned under the {line}" if i == 0 else f"#   {line.strip()}"
                for i, line in enumerate(self.space.describe_workload())
            ),
            "# measured:" + (" (re-validated)" if self.candidate.revalidated else " (first measurement, not re-validated)"),
            *[f"#   {line}" for line in self.figures()],
            "# limits:",
            *[f"#   {line}" for line in self.limits.render(default_contexts(self.limits)).splitlines()],
            *[f"# WARNING: {w}" for w in self.warnings()],
        ]
        env_lines = [f"Environment={shlex.quote(f'{k}={v}')}" for k, v in self._public_env().items()]
        if self.secret_env:
            env_lines.append(f"# secrets ({', '.join(self.secret_env)}) are read from the EnvironmentFile, never written here")
            env_lines.append(f"EnvironmentFile=/etc/tuner/{name}.env")
        unit = [
            *comment,
            "[Unit]",
            f"Description={self.space.engine} serving {self.space.model.path} (tuner study {self.study}, trial "
            f"{self.candidate.number})",
            "After=network-online.target",
            "Wants=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            *env_lines,
            *([f"LimitAS={self.memory_cap}"] if self.memory_cap else []),
            "ExecStart=" + " ".join(_systemd_quote(a) for a in self.command.argv),
            "Restart=on-failure",
            "RestartSec=5",
            "KillMode=control-group",
            "TimeoutStartSec=infinity" if self.space.hardware.kind == "gpu" else "TimeoutStartSec=300",
            "TimeoutStopSec=30",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
        ]
        return "\n".join(unit) + "\n"


def _systemd_quote(arg: str) -> str:
    """systemd's own quoting: double quotes, backslash escapes; % doubled (specifiers)."""
    arg = arg.replace("%", "%%")
    if arg and all(c.isalnum() or c in "-_./:=,+@" for c in arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def build_export(
    study: Studied, space: SearchSpace, candidate: Candidate, *, port: int = 8000, run_dir: Path | None = None
) -> Export:
    """The chosen trial as it ran (see the module doc); ``run_dir`` holds older studies' records."""
    record = record_of(study, trials=False)
    adapter = engines.get(space.engine)
    secret_names = (space.server.api_key_env,) if space.server.api_key_env else ()
    here = adapter.command(candidate.trial.params, space=space, model_path=adapter.resolve_model(space.model.path), port=port)
    launch = recorded_launch(candidate.trial, adapter, run_dir)
    local_version = adapter.version()
    notes: list[str] = []
    if launch is None:
        command, version, cap = here, local_version, space.server.memory_cap
        notes.append(
            f"trial {candidate.number} has no launch record: its command was re-rendered by this machine's {space.engine} adapter"
        )
    else:
        env = {k: v for k, v in launch.env.items() if "***" not in v}
        command = Command(_with_port(launch.argv, port), env)
        version, cap = launch.engine_version, launch.memory_cap
        if launch.engine_version != local_version:
            notes.append(
                f"ran on {space.engine} {launch.engine_version or '(version not recorded)'}; this machine has "
                f"{local_version or 'no ' + space.engine}: the export keeps the flags that ran"
            )
        ran, would = _flags(launch.argv, adapter.listen_flags), _flags(here.argv, adapter.listen_flags)
        if ran != would:
            only_ran = [w for w in ran if w.startswith("--") and w not in would]
            only_here = [w for w in would if w.startswith("--") and w not in ran]
            if only_ran or only_here:
                notes.append(
                    f"this machine's adapter would spell it differently ({', '.join(only_here) or 'nothing new'} instead of "
                    f"{', '.join(only_ran) or 'nothing'}): the export keeps what ran"
                )
    secret_env = tuple(
        sorted(
            {k for k in here.env if k in secret_names or _engine_secret(k)}
            | {k for k in command.env if _engine_secret(k)}
            | ({k for k, v in launch.env.items() if "***" in v} if launch else set())
        )
    )
    limits = for_trial(adapter.configured_limits(space.values(candidate.trial.params)), candidate.trial)
    return Export(
        study=record.name,
        candidate=candidate,
        space=space,
        command=command,
        secret_env=secret_env,
        limits=limits,
        engine_version=version,
        metric_names=list(record.metric_names or []),
        memory_cap=cap,
        notes=tuple(notes),
    )


def _engine_secret(name: str) -> bool:
    return name.endswith(("API_KEY", "_TOKEN", "_SECRET"))


def _confirmed_summary(found: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the export says of the pick's long run: its answer, length, verdict, goodput, drift."""
    if not found:
        return None
    keys = ("answer", "seconds", "held", "goodput", "goodput_ci", "drift", "broke", "failure", "host")
    return {key: found.get(key) for key in keys}
