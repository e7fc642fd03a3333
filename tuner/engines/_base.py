"""The engine adapter contract: one implementation per inference engine."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tuner.engines._signatures import Signature, SignatureMatch, classify
from tuner.engines.memory import MemoryModel

if TYPE_CHECKING:
    import httpx

    from tuner.base.records import Capacity
    from tuner.host.partitions import Partition
    from tuner.space import SearchSpace

__all__ = ["Command", "EngineAdapter", "hub_or_local_problem", "render_flag"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

CAPPED_MALLOC_ARENAS = "2"
"""glibc's malloc arenas under a memory cap. The cap is RLIMIT_AS, which counts address space
reserved, not used: glibc reserves 64 MiB for each thread's arena (up to 8 per core), and a
llama-server, which opens a thread per connection, then died at its 1 GiB cap under an open loop
("Resource temporarily unavailable" creating a thread) with 0.5 GiB of it used. Two arenas keep
what the cap measures near what the server holds (tests/test_server.py)."""


def hub_or_local_problem(path: str) -> str | None:
    """A GPU engine's model is a local directory or file, or a hub id ``owner/name``."""
    if os.path.exists(path) or (_HUB_ID.match(path) and not path.startswith((".", "/"))):
        return None
    return f"model {path!r} is neither an existing path nor a hub id like 'owner/name'"


@dataclass(frozen=True)
class Command:
    """What to execute: an argv list (never a shell string) and environment additions.

    ``secrets`` are values that must never be written anywhere (logs, evidence, exports).
    """

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    def shell_line(self) -> str:
        """A correctly quoted shell line (env first), secrets redacted."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return self.redact(" ".join([*env, *map(shlex.quote, self.argv)]))


def package_version(package: str, *version_files: str) -> str | None:
    """An installed package's version: its metadata, else (a package laid out on PYTHONPATH
    without metadata, as the offline GPU host has it) the ``__version__`` in its version file,
    read without importing the package."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for name in version_files:
            path = Path(folder) / name
            if path.is_file():
                found = re.search(
                    r"""__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", path.read_text(errors="replace")
                )
                if found:
                    return found[1]
    return None


def render_flag(name: str, value: Any) -> list[str]:
    """The one place a parameter becomes argv: bool -> ``--x`` / nothing, dict/list -> JSON."""
    flag = f"--{name}"
    if isinstance(value, bool):
        return [flag] if value else []
    if isinstance(value, (dict, list)):
        return [flag, json.dumps(value, separators=(",", ":"))]
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1:
        value = int(value)
    if isinstance(value, float):
        return [flag, f"{value:.10g}"]  # 0.9000000000000001 (a sampler's step arithmetic) -> 0.9
    return [flag, str(value)]


@dataclass(frozen=True)
class FreshSpread:
    """The relative SD of a load figure between fresh servers of one config, pooled over the
    configs measured (``dof`` degrees of freedom), and where (``source``)."""

    relative_sd: float
    dof: int
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"relative_sd": self.relative_sd, "dof": self.dof, "source": self.source}


class EngineAdapter(ABC):
    """Knows how to launch, probe and read one inference engine.

    Contract:
    - ``command`` renders every flag through :meth:`render_flags`; export replays the same path.
    - ``ready`` returns ``True`` only when the server answered a real completion, ``False``
      while it is still coming up; it raises nothing for a server that is not listening yet.
    - ``capacity`` reads the engine's own words (log lines, endpoints); the last log line wins.
    - ``signatures`` are in priority order: the first that matches a log names the failure.
    Adapters are stateless and safe to share between threads.
    """

    name: ClassVar[str]
    signatures: ClassVar[tuple[Signature, ...]] = ()
    health_path: ClassVar[str] = "/health"
    # (queries, hits) counter names in /metrics that count prompt tokens looked up in / served
    # from the prefix cache, for engines whose usage omits cached tokens; None: not exposed.
    prefix_cache_metrics: ClassVar[tuple[str, str] | None] = None
    # (event key, field) where a streamed event counts prompt tokens reused from the cache in the
    # engine's own words, beyond OpenAI's usage.prompt_tokens_details.cached_tokens; None: it does not
    cached_tokens_field: ClassVar[tuple[str, str] | None] = None
    # where the engine says how many requests it has in flight (running and queued), so a load level
    # starts on a drained server: ("/metrics", gauge names summed) or ("/slots", (flag,)) counted
    # over the slots that have it true; None: it does not say (the drain times a 1-token request)
    in_flight_source: ClassVar[tuple[str, tuple[str, ...]] | None] = None
    # tokens of the reported per-request context a request may not use (SGLang refuses a request
    # whose prompt + output *reaches* context_len: tokenizer_manager's ``>=``)
    context_slack: ClassVar[int] = 0
    # (log regex, phase label) the engine prints while it starts, for the live status line
    startup_phases: ClassVar[tuple[tuple[str, str], ...]] = ()
    # what the engine spends memory on, for the pre-screen (tuner.results.screen); None: never predict
    memory: ClassVar[MemoryModel | None] = None
    graphs_off_flags: ClassVar[tuple[str, ...]] = ()  # flags that serve without CUDA graphs (a load-time warning)
    listen_flags: ClassVar[tuple[str, ...]] = (
        "--host",
        "--port",
    )  # where it listens: not a tuned flag (export compares the rest)
    typical_start_s: ClassVar[float] = 60.0  # a start as measured here: the dry run's estimate of a night
    typical_install_s: ClassVar[float] = 0.0  # what provision() takes where the engine is missing (a build)
    # per hardware kind: the relative SD of a load figure between fresh servers of one config, as
    # measured here (the prior a study uses until it measures its own floor: tuner.results.noise)
    fresh_server_spread: ClassVar[Mapping[str, FreshSpread]] = {}

    @abstractmethod
    def executable(self) -> list[str]:
        """The argv prefix that starts the server (may provision the engine)."""

    @abstractmethod
    def model_args(self, model_path: str) -> list[str]:
        """The argv part that names the model."""

    def version(self) -> str | None:
        return None

    def provision(self, progress: Callable[[float, str], None] | None = None) -> None:
        """Install what the engine needs before the first launch (default: nothing)."""
        return None

    def resolve_model(self, path: str) -> str:
        """Turn the space's ``model.path`` into something the engine loads (may provision)."""
        return path

    def model_problem(self, path: str) -> str | None:
        """Why ``model.path`` cannot be used, checked at validation time; ``None`` when fine."""
        return None

    def logged_version(self, log_text: str) -> str | None:
        """The engine version a server log states (an older study's launch record lacks it)."""
        return None

    def config_file(self, flags: Mapping[str, Any]) -> dict[str, Any] | None:
        """The engine's own config file for ``flags`` (the export's YAML), where it reads one."""
        return None

    def render_flags(self, flags: Mapping[str, Any]) -> list[str]:
        return [arg for name, value in flags.items() for arg in render_flag(name, value)]

    def environment(self, space: SearchSpace) -> dict[str, str]:
        """Environment additions for the server: the space's ``server.env``, and under a memory cap
        ``MALLOC_ARENA_MAX`` (:data:`CAPPED_MALLOC_ARENAS`) unless the space sets it."""
        env = dict(space.server.env)
        if space.server.memory_cap is not None:
            env.setdefault("MALLOC_ARENA_MAX", CAPPED_MALLOC_ARENAS)
        return env

    def installed(self) -> tuple[list[str] | None, str]:
        """The executable's argv if the engine is installed here (None if not) and a line that
        says what was found, without installing or building anything (the dry run)."""
        version = self.version()
        return (self.executable(), f"{self.name} {version}") if version else (None, f"{self.name}: not installed here")

    def shown_model(self, path: str) -> str:
        """``model.path`` as a command line would show it, without fetching anything."""
        return path

    def command(
        self,
        params: Mapping[str, Any],
        *,
        space: SearchSpace,
        model_path: str,
        port: int,
        partition: Partition | None = None,
        secrets: Sequence[str] = (),
        executable: Sequence[str] | None = None,
    ) -> Command:
        flags = space.values(params)
        argv = [
            *(executable if executable is not None else self.executable()),
            *self.model_args(model_path),
            *self.render_flags(flags),
            *self.listen_args(space.server.host, port),
        ]
        env = self.environment(space)
        key = os.environ.get(space.server.api_key_env) if space.server.api_key_env else None
        if key:
            argv += self.api_key_args(key)
            env.update(self.api_key_env(key))
        if partition is not None:
            argv = partition.wrap(argv)
            env.update(partition.env())
        return Command(tuple(argv), env, tuple(secrets))

    def api_key_args(self, key: str) -> list[str]:
        """Flags that make the server require ``key`` (redacted wherever argv is shown)."""
        return []

    def api_key_env(self, key: str) -> dict[str, str]:
        """Environment that makes the server require ``key``."""
        return {}

    def listen_args(self, host: str, port: int) -> list[str]:
        return ["--host", host, "--port", str(port)]

    @abstractmethod
    def ready(self, client: httpx.Client, base_url: str, *, model: str) -> bool:
        """True once the server serves a real completion."""

    @abstractmethod
    def capacity(self, log_text: str, client: httpx.Client | None, base_url: str | None) -> Capacity:
        """Capacity in the engine's own words; endpoints are skipped when ``client`` is None."""

    def configured_limits(self, flags: Mapping[str, Any]) -> dict[str, int | None]:
        """Limits the flags set, named as :class:`tuner.results.limits.Limits` fields (engine defaults
        filled in where the engine has one). ``max_queued_requests`` None means unbounded."""
        return {}

    def fast_path(self, flags: Mapping[str, Any]) -> int | None:
        """The most running requests ``flags`` decode on CUDA graphs, where more may run at once
        (None: no graphs, no cap known, or no more may run): past it each decode step runs without
        them, slower, and a queue near the limit feeds itself (docs/goodput.md, the twelfth session:
        SGLang at 40.4 requests/s tipped past its 128 at a random minute, its steps 33-45 ms against 2-10)."""
        limits = self.configured_limits(flags)
        graph, running = limits.get("cuda_graph_max_bs"), limits.get("max_running_requests")
        return int(graph) if graph and (running is None or running > graph) else None

    def served_model_name(self, model_path: str) -> str:
        """The ``model`` field to send in OpenAI-compatible requests."""
        return model_path

    def classify(self, log_text: str) -> SignatureMatch | None:
        return classify(self.signatures, log_text)
