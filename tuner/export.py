"""Export a chosen trial as a serve config: shell command, YAML, systemd unit, JSON.

The trial's params are replayed through the same engine adapter `tune run` used, so flags are
rendered in exactly one place. Secrets never appear: environment values that are secrets are
left out and named, with the EnvironmentFile a unit reads them from.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

import optuna
import yaml

from tuner import engines
from tuner.engines import Command
from tuner.limits import Limits, default_contexts, from_config
from tuner.pick import Candidate
from tuner.records import Capacity
from tuner.space import SearchSpace

__all__ = ["Export", "FORMATS", "build_export"]

FORMATS = ("cmd", "yaml", "systemd", "json")


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

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.candidate.trial.params)

    def warnings(self) -> list[str]:
        notes = []
        if not self.candidate.revalidated:
            notes.append(f"trial {self.candidate.number} was never re-validated (run `tune validate --study {self.study}`)")
        if self.limits.queue_unbounded:
            notes.append("its queue is unbounded: under overload requests wait instead of being rejected")
        return notes

    def figures(self) -> list[str]:
        metrics = self.candidate.trial.user_attrs.get("metrics", {})
        lines = [f"{name}: {value:,.1f}" for name, value in zip(self.metric_names, self.candidate.values, strict=False)]
        for key in ("load.ttft_p99", "load.error_rate", "capacity.kv_tokens", "capacity.context_per_request"):
            if key in metrics and key not in self.metric_names:
                lines.append(f"{key}: {metrics[key]:,.3f}")
        return lines

    def render(self, fmt: str) -> str:
        return {"cmd": self._cmd, "yaml": self._yaml, "systemd": self._systemd, "json": self._json}[fmt]()

    def _public_env(self) -> dict[str, str]:
        return {k: v for k, v in self.command.env.items() if k not in self.secret_env}

    def _cmd(self) -> str:
        env = [f"{k}={shlex.quote(v)}" for k, v in self._public_env().items()]
        return " ".join([*env, *map(shlex.quote, self.command.argv)]) + "\n"

    def _yaml(self) -> str:
        flags = self.space.values(self.params)
        doc: dict[str, Any] = {
            "engine": self.space.engine,
            "model": self.space.model.path,
            "flags": flags,
            "env": self._public_env(),
            "from": {"study": self.study, "trial": self.candidate.number},
        }
        if self.space.engine == "vllm":  # vLLM reads flags from `vllm serve --config FILE`
            doc = {k.replace("-", "_"): v for k, v in flags.items()}
        return yaml.safe_dump(doc, sort_keys=False)

    def _json(self) -> str:
        return json.dumps(
            {
                "engine": self.space.engine,
                "engine_version": self.engine_version,
                "argv": list(self.command.argv),
                "env": self._public_env(),
                "secret_env": list(self.secret_env),
                "params": self.params,
                "study": self.study,
                "trial": self.candidate.number,
                "values": dict(zip(self.metric_names, self.candidate.values, strict=False)),
                "revalidated": self.candidate.revalidated,
                "limits": self.limits.to_dict(default_contexts(self.limits)),
                "warnings": self.warnings(),
            },
            indent=2,
        ) + "\n"

    def _systemd(self) -> str:
        name = f"tuner-{self.study}"
        comment = [
            f"# {name}.service: exported by `tune export` from study {self.study!r}, trial {self.candidate.number}",
            f"# engine: {self.space.engine} {self.engine_version or '(version unknown)'}",
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
            f"Description={self.space.engine} serving {self.space.model.path} (tuner study {self.study}, trial {self.candidate.number})",
            "After=network-online.target",
            "Wants=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            *env_lines,
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


def build_export(study: optuna.Study, space: SearchSpace, candidate: Candidate, *, port: int = 8000) -> Export:
    adapter = engines.get(space.engine)
    secret_names = (space.server.api_key_env,) if space.server.api_key_env else ()
    command = adapter.command(candidate.trial.params, space=space, model_path=adapter.resolve_model(space.model.path), port=port)
    secret_env = tuple(k for k in command.env if k in secret_names or _engine_secret(k))
    capacity_data = candidate.trial.user_attrs.get("capacity")
    capacity = Capacity.from_dict(capacity_data) if capacity_data else None
    limits = from_config(adapter.configured_limits(space.values(candidate.trial.params)), capacity)
    return Export(
        study=study.study_name,
        candidate=candidate,
        space=space,
        command=command,
        secret_env=secret_env,
        limits=limits,
        engine_version=adapter.version(),
        metric_names=list(study.metric_names or []),
    )


def _engine_secret(name: str) -> bool:
    return name.endswith(("API_KEY", "_TOKEN", "_SECRET"))
