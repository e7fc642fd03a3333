"""The search-space schema: pydantic models, extra keys forbidden, checked on load."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tuner.base.units import parse_bytes, parse_duration
from tuner.workload.spec import WorkloadSpec

__all__ = [
    "Budget",
    "CategoricalParam",
    "ConfirmProbeSpec",
    "FloatParam",
    "Hardware",
    "IntParam",
    "LoadProbeSpec",
    "ModelSpec",
    "OverloadProbeSpec",
    "Parameter",
    "ProbesSpec",
    "RecallProbeSpec",
    "RemeasureSpec",
    "SamplerSpec",
    "SearchSpace",
    "ServerSpec",
]

Scalar = bool | int | float | str
_SHELL_META = re.compile(r"[;&|`$<>(){}\n\r*?!\\\"']")
_FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntParam(_Strict):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(1, ge=1)
    log: bool = False

    def contains(self, value: Any) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and self.low <= value <= self.high
            and (value - self.low) % self.step == 0
        )

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step != 1:
            raise ValueError("step cannot be combined with log")
        return self


class FloatParam(_Strict):
    type: Literal["float"]
    low: float
    high: float
    step: float | None = Field(None, gt=0)
    log: bool = False

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.low <= value <= self.high

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step is not None:
            raise ValueError("step cannot be combined with log")
        return self


class CategoricalParam(_Strict):
    type: Literal["categorical"]
    choices: list[Scalar] = Field(min_length=1)

    def contains(self, value: Any) -> bool:
        return value in self.choices

    @field_validator("choices")
    @classmethod
    def _unique(cls, choices: list[Scalar]) -> list[Scalar]:
        if len({repr(c) for c in choices}) != len(choices):
            raise ValueError("choices must be unique")
        return choices


Parameter = Annotated[IntParam | FloatParam | CategoricalParam, Field(discriminator="type")]


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) > high ({high})")
    if log and low <= 0:
        raise ValueError(f"log scale needs low > 0, got {low}")


def check_path(value: str) -> str:
    """A path must not carry shell metacharacters: it ends up in exported shell commands."""
    if _SHELL_META.search(value):
        raise ValueError(f"path {value!r} contains shell metacharacters")
    return value


class ModelSpec(_Strict):
    """``path`` is a file, or ``builtin:<name>`` for a model the engine provisions itself."""

    path: str
    name: str | None = None

    _check_path = field_validator("path")(classmethod(lambda cls, v: check_path(v)))


class ServerSpec(_Strict):
    host: str = "127.0.0.1"
    flags: dict[str, Scalar] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    startup_timeout: float = 120.0
    memory_cap: int | None = None
    api_key_env: str | None = None

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, flags: dict[str, Scalar]) -> dict[str, Scalar]:
        for name in flags:
            if not _FLAG_NAME.match(name):
                raise ValueError(f"flag name {name!r} must be letters, digits, '-' or '_'")
        return flags

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not valid")
        return env

    @field_validator("startup_timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("memory_cap", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int | None:
        return None if v is None else parse_bytes(v)


class _ProbeSpec(_Strict):
    """What every probe spec has: how long one request may take (``request_timeout``: 90s, 10m)."""

    request_timeout: float = 60.0

    @field_validator("request_timeout", mode="before")
    @classmethod
    def _request_timeout(cls, v: Any) -> float:
        return parse_duration(v)


OWNED_FIELDS = (
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "ignore_eos",
    "stream",
    "stream_options",
    "n",
)


class LoadProbeSpec(_ProbeSpec):
    """A closed loop per concurrency level, measured in a steady-state window (see probes.load).

    ``duration``: the shortest window; ``max_duration``: the longest, extended toward it until
    the 95 % CI half-width of output tok/s is within ``ci_target`` of the mean. ``warmup``:
    requests each client finishes before the window opens (>= 1: one full wave). ``requests``:
    an optional floor of requests finished inside the window. ``prefix_tokens``: leading tokens
    shared by every prompt (a shared-prefix workload on purpose; 0: every prompt is new).
    ``request``: fields added to every request's body, as the clients being served send them
    (sampling: ``temperature``, ``top_p``, ``top_k``, penalties...). They are not free: on
    SGLang a penalty such as ``min_tokens`` adds work to every decode step. The probe owns the
    fields that make its measurement (:data:`OWNED_FIELDS`: the prompt, the exact output length
    by ``max_tokens`` and ``ignore_eos``, streaming with usage); by default it sends greedy decoding
    (``temperature: 0``) and nothing else.
    """

    api: Literal["completions", "chat"] = "completions"
    concurrency: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [1], min_length=1)
    target: int | None = Field(None, ge=1)
    prompt_tokens: int = Field(128, ge=1)
    output_tokens: int = Field(64, ge=1)
    prefix_tokens: int = Field(0, ge=0)
    requests: int | None = Field(None, ge=1)
    duration: float = Field(30.0, gt=0)
    max_duration: float = Field(120.0, gt=0)
    ci_target: float = Field(0.02, gt=0, lt=1)
    batches: int = Field(10, ge=2, le=100)
    warmup: int = Field(1, ge=0)
    request_timeout: float = 120.0
    dataset: str | None = None
    workload: WorkloadSpec | None = None  # the space's ``workload:`` (set when it loads): instead of the fixed shape
    request: dict[str, Any] = Field(default_factory=dict)

    @field_validator("request")
    @classmethod
    def _not_owned(cls, v: dict[str, Any]) -> dict[str, Any]:
        if owned := sorted(set(v) & set(OWNED_FIELDS)):
            raise ValueError(
                f"request sets {', '.join(owned)}, which the probe owns (the prompt, the output length, streaming): "
                "set the lengths by prompt_tokens/output_tokens or a workload"
            )
        return v

    @field_validator("duration", "max_duration", mode="before")
    @classmethod
    def _level_duration(cls, v: Any) -> float:
        return 30.0 if v is None else parse_duration(v)  # None: a space stored before levels were timed

    _check_dataset = field_validator("dataset")(classmethod(lambda cls, v: v if v is None else check_path(v)))

    @model_validator(mode="after")
    def _target_in_levels(self) -> LoadProbeSpec:
        if self.target is not None and self.target not in self.concurrency:
            raise ValueError(f"target {self.target} is not one of concurrency {self.concurrency}")
        if self.max_duration < self.duration:
            raise ValueError(f"max_duration ({self.max_duration:g}s) is shorter than duration ({self.duration:g}s)")
        if self.prefix_tokens >= self.prompt_tokens:
            raise ValueError(f"prefix_tokens ({self.prefix_tokens}) must be less than prompt_tokens ({self.prompt_tokens})")
        return self

    @property
    def target_concurrency(self) -> int:
        return self.target if self.target is not None else max(self.concurrency)


class RecallProbeSpec(_ProbeSpec):
    """A needle ladder (see probes.recall). ``lengths: auto`` (the default) derives the rungs from
    the server's configured per-request context: powers of two from ``start`` below it, then the
    context itself, so a config's context value is what it recalls, not what it was told. A list
    is a fixed ladder. Each rung runs every depth ``repeats`` times; ``distractors`` adds that many
    other pass keys to the haystack (a harder task that separates KV precisions sooner)."""

    lengths: list[Annotated[int, Field(ge=64)]] | Literal["auto"] = "auto"
    start: int = Field(1024, ge=64)
    depths: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(default_factory=lambda: [0.5], min_length=1)
    repeats: int = Field(1, ge=1, le=20)
    distractors: int = Field(0, ge=0, le=64)
    threshold: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = 0
    request_timeout: float = 600.0

    @field_validator("lengths")
    @classmethod
    def _ascending(cls, lengths: list[int] | str) -> list[int] | str:
        if isinstance(lengths, list) and (not lengths or lengths != sorted(set(lengths))):
            raise ValueError("lengths must be 'auto' or a non-empty list, unique and ascending")
        return lengths


class ServedContextProbeSpec(_ProbeSpec):
    """The seeds' failure class: a buffer sized by the maximum context that fails only when long
    requests arrive. ``concurrency`` requests (default: the load probe's target) whose prompts fill
    the configured per-request context (prompt = context - ``output_tokens``) are sent at once and
    must all complete without error."""

    concurrency: int | None = Field(None, ge=1)
    output_tokens: int = Field(16, ge=1)
    request_timeout: float = 900.0


class OverloadProbeSpec(_ProbeSpec):
    factor: float = Field(2.0, gt=1.0)
    capacity: int = Field(4, ge=1, description="used when the engine does not report its running-request limit")
    max_burst: int = Field(512, ge=2)
    prompt_tokens: int = Field(32, ge=1)
    output_tokens: int = Field(16, ge=1)
    request_timeout: float = 60.0


class SloTargets(_Strict):
    """What a config must hold at a load to count as serving it (an objective set's ``slo``):
    p99 time to first token, p99 inter-token latency and p99 time per output token (seconds; a
    target left out is not checked) and the share of failed requests."""

    ttft_p99: float | None = Field(None, gt=0)
    itl_p99: float | None = Field(None, gt=0)
    tpot_p99: float | None = Field(None, gt=0)
    error_rate: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _some_latency(self) -> SloTargets:
        if self.ttft_p99 is None and self.itl_p99 is None and self.tpot_p99 is None:
            raise ValueError("an slo needs at least one of ttft_p99, itl_p99, tpot_p99 (seconds)")
        return self

    @property
    def latencies(self) -> tuple[str, ...]:
        """The latency targets set (of ``ttft_p99``, ``itl_p99``, ``tpot_p99``), in that order."""
        return tuple(n for n in ("ttft_p99", "itl_p99", "tpot_p99") if getattr(self, n) is not None)

    def violated(self, level: Mapping[str, Any]) -> list[str]:
        """The targets a load level's figures break (``"ttft_p99 1.31 > 1"``); empty: it holds them all.
        A latency the level could not measure (no request finished) breaks its target, and so does a
        TTFT p99 whose lower bound (``ttft_p99_censored``: requests still waiting for their first
        token when the window closed, counted with their waits so far) is over it. An open-loop
        level whose requests in the system grow faster than :meth:`critical_growth` breaks it too:
        a ``decisive`` level (one that makes an answer: the hold, a confirmation) on its growth's
        estimate, a search level only where its whole interval lies above (shown to grow)."""
        broken = []
        for name in self.latencies:
            bound = getattr(self, name)
            value = level.get(name)
            if name == "ttft_p99" and (censored := level.get("ttft_p99_censored")) is not None and censored > bound:
                broken.append(f"ttft_p99 >= {censored:.3g} > {bound:g} ({level.get('waiting', 0)} still waiting)")
            elif value is None or value > bound:
                broken.append(f"{name} {'unmeasured' if value is None else f'{value:.3g}'} > {bound:g}")
        if (rate := level.get("error_rate") or 0.0) > self.error_rate:
            broken.append(f"error_rate {rate:.3g} > {self.error_rate:g}")
        growth, ci, critical = level.get("growth"), level.get("growth_ci") or 0.0, self.critical_growth(level)
        if growth is not None and critical is not None:
            judged = growth if level.get("decisive") else growth - ci
            if judged > critical:
                broken.append(f"requests in the system grew {growth:.3g} +- {ci:.2g}/s > {self._growth_allowed(level, critical)}")
        return broken

    def critical_growth(self, level: Mapping[str, Any]) -> float | None:
        """The growth of requests in the system (per second) that breaks the SLO within the
        level's ``horizon_s`` (how long the load must hold: the confirmation's length): a queue
        growing by g a second adds g x horizon requests, which wait g x horizon / completion rate
        seconds more, so g* = completion rate x headroom / horizon, where the headroom is the TTFT
        target less the level's TTFT p99 (without a TTFT target: the request timeout less its E2E
        p99, past which requests fail). None where the level is no open loop or says no horizon."""
        horizon, done = level.get("horizon_s"), level.get("completion_rate")
        if not horizon or done is None or level.get("growth") is None:
            return None
        return max(0.0, float(done) * self._headroom(level) / float(horizon))

    def _growth_allowed(self, level: Mapping[str, Any], critical: float) -> str:
        """What growth the level could afford and why, for a break's line: the wait it adds within
        the horizon, or, where the level's own tail already used the headroom up, that none is left."""
        if critical > 0:
            within = f"{self._headroom(level):.2g} s of wait within {level.get('horizon_s', 0):.0f} s"
            return f"{critical:.2g}/s, what adds {within} (completions fall behind arrivals)"
        if self.ttft_p99 is not None:
            tail = f"TTFT p99 {level.get('ttft_p99') or 0.0:.3g} s against {self.ttft_p99:g} s"
        else:
            tail = f"E2E p99 {level.get('e2e_p99') or 0.0:.3g} s against the {level.get('request_timeout') or 0.0:g}-s timeout"
        return f"0/s: its {tail} leaves no headroom, so any growth breaks it"

    def _headroom(self, level: Mapping[str, Any]) -> float:
        if self.ttft_p99 is not None:
            return max(0.0, self.ttft_p99 - (level.get("ttft_p99") or 0.0))
        return max(0.0, (level.get("request_timeout") or 0.0) - (level.get("e2e_p99") or 0.0))


class SloProbeSpec(_ProbeSpec):
    """The largest load at which every target of the objective set's ``slo`` holds (see probes.slo).

    Closed loop (concurrent clients, the load probe's workload and windows): from ``start``
    clients, doubling up to the bound the KV pool allows (``kv_tokens`` / tokens per request) or
    ``max_concurrency`` or the first level that breaks the SLO, then bisecting until the bracket
    is within ``resolution`` (relative; 0: to one client). At most ``max_levels`` levels per trial
    (levels the load probe measured already are reused, not run again). ``targets`` come from the
    objective set when the space is loaded: they are written once, there.

    ``mode: rate`` searches the open-loop answer instead: Poisson arrivals at a request rate (as
    ``vllm bench serve --request-rate``), from ``start_rate`` per second doubling up to
    ``max_rate`` or the first break, then bisecting to ``resolution`` (default 10 %).

    Before a level becomes the answer it holds once more on the same server for ``hold`` seconds
    (default: 60 on GPU spaces, 0 = off on CPU ones, set when the space loads), extended up to
    ``hold_max`` (default 3 x ``hold``) while an open loop's growth is undecided; one that does
    not hold counts as broken and the search goes on a ``resolution`` below it (at most ``holds``
    such levels, counting the level above the answer, held too where it broke only on growth or a
    latency; after the last, no level runs and there is no answer).
    ``horizon``: how long an answer must hold (seconds; default: the space's
    ``remeasure.confirm``, else 10 minutes): an open-loop level breaks the SLO where its queue
    grows fast enough to break it within that long (:meth:`SloTargets.critical_growth`)."""

    mode: Literal["concurrency", "rate"] = "concurrency"
    start: int = Field(1, ge=1)
    max_concurrency: int | None = Field(None, ge=1)
    start_rate: float = Field(1.0, gt=0)  # requests per second (mode: rate)
    max_rate: float | None = Field(None, gt=0)
    max_levels: int = Field(6, ge=2, le=40)
    resolution: float = Field(0.0, ge=0, lt=1)
    hold: float | None = Field(None, ge=0)
    hold_max: float | None = Field(None, ge=0)
    holds: int = Field(3, ge=1, le=10)
    horizon: float | None = Field(None, gt=0)
    targets: SloTargets | None = None

    @field_validator("hold", "hold_max", "horizon", mode="before")
    @classmethod
    def _hold_seconds(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)

    @model_validator(mode="after")
    def _hold_within_max(self) -> SloProbeSpec:
        if self.hold is not None and self.hold_max is not None and self.hold_max < self.hold:
            raise ValueError(f"hold_max ({self.hold_max:g}s) is shorter than hold ({self.hold:g}s)")
        return self


class ConfirmProbeSpec(_ProbeSpec):
    """One long level at a config's SLO answer (see probes.confirm): ``concurrency`` clients
    (closed loop) or Poisson arrivals at ``rate`` per second (open loop), with ``load``'s workload,
    for ``duration`` (default 10 minutes, MLPerf LoadGen's minimum run), figures per ``slice``
    (default a minute) against ``targets``. A run that does not hold ends at the first slice that
    breaks the SLO and the load steps down by ``step`` (10 %; a closed loop at least one client),
    on the same server once it has drained, until a run holds for ``duration``, at most ``steps``
    times and within ``budget`` seconds, each run only where it ends before ``until``. `tune
    validate --confirm` and the end of `tune run`
    (``remeasure.confirm``) build it from the pick; a space may state one too."""

    concurrency: int | None = Field(None, ge=1)
    rate: float | None = Field(None, gt=0)
    duration: float = Field(600.0, gt=0)
    slice: float = Field(60.0, gt=0)
    load: LoadProbeSpec = Field(default_factory=LoadProbeSpec)
    targets: SloTargets | None = None
    step: float = Field(0.1, gt=0, lt=1)  # a run that does not hold steps the load down by this share
    steps: int = Field(3, ge=0, le=20)  # at most this many steps below the answer
    budget: float | None = Field(None, gt=0)  # seconds for every run together: a step that cannot finish is not started
    # epoch seconds by which every run must have ended (`tune validate --confirm --timeout`): one that cannot, reckoned
    # once the server is up, is not started, the first included
    until: float | None = Field(None, gt=0)

    @field_validator("duration", "slice", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("budget", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)

    @model_validator(mode="after")
    def _one_answer(self) -> ConfirmProbeSpec:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("a confirmation runs at one answer: give concurrency or rate, not both")
        return self


class ProbesSpec(_Strict):
    load: LoadProbeSpec | None = Field(default_factory=LoadProbeSpec)
    recall: RecallProbeSpec | None = None
    served: ServedContextProbeSpec | None = None
    overload: OverloadProbeSpec | None = None
    slo: SloProbeSpec | None = None
    confirm: ConfirmProbeSpec | None = None


class Budget(_Strict):
    """``trials``: at most this many; ``timeout``: the search stops launching after it;
    ``deadline``: the whole run (the engine's install included) ends within it: a trial is
    launched only while it and the runs after the search fit (:mod:`tuner.orchestration.deadline`)."""

    trials: int = Field(8, ge=1)
    timeout: float | None = None
    trial_timeout: float | None = None
    deadline: float | None = None

    @field_validator("timeout", "trial_timeout", "deadline", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)


class Hardware(_Strict):
    """Devices the study may use: CPU cores or GPU ids; ``per_trial`` is a count or a parameter name."""

    kind: Literal["cpu", "gpu"] = "cpu"
    devices: list[Annotated[int, Field(ge=0)]] = Field(default_factory=lambda: [0], min_length=1)
    per_trial: int | str = 1
    accelerator: str | None = None

    @field_validator("devices")
    @classmethod
    def _unique(cls, devices: list[int]) -> list[int]:
        if len(set(devices)) != len(devices):
            raise ValueError("devices must be unique")
        return devices

    @model_validator(mode="after")
    def _fits(self) -> Hardware:
        if isinstance(self.per_trial, int) and not 1 <= self.per_trial <= len(self.devices):
            raise ValueError(f"per_trial ({self.per_trial}) must be between 1 and {len(self.devices)} devices")
        return self


class RemeasureSpec(_Strict):
    """Fresh-server re-measurement around a run (see tuner.orchestration.validate): the reference config
    ``reference_runs`` times at the start (the noise floor) and once after every ``every`` trials
    (drift while the study runs), then the ``top`` front candidates and
    the reference ``repeats`` times each at the end, interleaved; then, with ``race``, the pick
    and the configs it ties with once more each, round by round, until the tie resolves or
    ``race`` launches are spent; then, with ``confirm`` (seconds, e.g. ``10m``) and an SLO probe,
    the pick once more on a fresh server for that long at its SLO answer (tuner.orchestration.confirm), when the
    run's time budget still allows it. ``share`` caps the launches before the race at that fraction of
    the trial budget (the top candidates are cut first)."""

    enabled: bool = True
    share: float = Field(0.5, ge=0.0, le=2.0)
    reference_runs: int = Field(1, ge=0)
    every: int = Field(0, ge=0, description="re-measure the reference after every this many trials (0: start and end only)")
    top: int = Field(3, ge=1)
    repeats: int = Field(1, ge=1)
    race: int = Field(0, ge=0, description="more launches, at most, to break the pick's ties (the tied configs only)")
    confirm: float = Field(0.0, ge=0, description="seconds of one long run of the pick at its SLO answer at the end (0: off)")

    @field_validator("confirm", mode="before")
    @classmethod
    def _confirm_seconds(cls, v: Any) -> float:
        return 0.0 if v in (None, 0, False) else parse_duration(v)

    def pauses(self, trials: int) -> list[int]:
        """Finished-trial counts after which the reference runs again (on a fresh server)."""
        if not self.every or not self.reference_runs:
            return []
        return list(range(self.every, trials, self.every))

    def plan(self, trials: int, front: int) -> tuple[int, int]:
        """(top, repeats) for the end of a run, within the budget share left after the start
        and the periodic reference runs."""
        left = int(self.share * trials) - self.reference_runs - len(self.pauses(trials))
        top = max(0, min(self.top, front, left // self.repeats - 1))  # each round: top candidates + the reference
        return top, (self.repeats if top > 0 else 0)


class SamplerSpec(_Strict):
    name: Literal["tpe", "nsga2", "random", "gp"] = "tpe"
    seed: int | None = 0
    startup_trials: int = Field(4, ge=0)
    screen: bool = True


class SearchSpace(_Strict):
    """A whole search space. Cross-field checks that need the engine registry live in ``load``."""

    name: str | None = None
    description: str | None = None
    engine: str
    model: ModelSpec
    server: ServerSpec = Field(default_factory=ServerSpec)
    parameters: dict[str, Parameter] = Field(min_length=1)
    constraints: list[str] = Field(default_factory=list)
    tied: dict[str, str] = Field(default_factory=dict, description="flag -> parameter whose value it always takes")
    enqueue: list[dict[str, Scalar]] = Field(default_factory=list)
    probes: ProbesSpec = Field(default_factory=ProbesSpec)
    objectives: str = "throughput-vs-context"
    budget: Budget = Field(default_factory=Budget)
    hardware: Hardware = Field(default_factory=Hardware)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    remeasure: RemeasureSpec = Field(default_factory=RemeasureSpec)
    workload: WorkloadSpec | str | None = None  # a file's path until the space is loaded (tuner.app.prepare)

    @field_validator("parameters")
    @classmethod
    def _param_names(cls, params: dict[str, Any]) -> dict[str, Any]:
        for name in params:
            if not _FLAG_NAME.match(name):
                raise ValueError(f"parameter name {name!r} must be letters, digits, '-' or '_'")
        return params

    def load_spec(self) -> LoadProbeSpec | None:
        """The load probe's spec as every probe that loads the server uses it: with the space's
        workload (a space with a workload and no load probe: the defaults' windows)."""
        if not isinstance(self.workload, WorkloadSpec):
            return self.probes.load
        return (self.probes.load or LoadProbeSpec()).model_copy(update={"workload": self.workload})

    def describe_workload(self) -> list[str]:
        """What the probes that load the server send, in a line (a line per class of a mixed
        workload): the space's workload, else the load probe's fixed shape."""
        if isinstance(self.workload, WorkloadSpec):
            return self.workload.describe()
        if isinstance(self.workload, str):
            return [f"workload: {self.workload} (not loaded)"]
        load = self.probes.load
        if load is None:
            return []
        if load.dataset:
            return [f"workload: prompts from {load.dataset}, {load.output_tokens:,} tokens out, every prompt fresh"]
        shared = f", the first {load.prefix_tokens:,} shared by all" if load.prefix_tokens else ", every prompt fresh"
        return [f"workload: the fixed shape: {load.prompt_tokens:,}-token prompts{shared}, {load.output_tokens:,} tokens out"]

    def values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Everything a launch of ``params`` sets: fixed flags, the params, and tied flags."""
        return {**self.server.flags, **params, **{flag: params[src] for flag, src in self.tied.items() if src in params}}

    @model_validator(mode="after")
    def _cross(self) -> SearchSpace:
        for flag, source in self.tied.items():
            if source not in self.parameters:
                raise ValueError(f"tied flag {flag!r} follows {source!r}, which is not a parameter")
            if flag in self.parameters or flag in self.server.flags:
                raise ValueError(f"tied flag {flag!r} is also a parameter or a fixed flag")
        clash = sorted(set(self.parameters) & set(self.server.flags))
        if clash:
            raise ValueError(f"{clash[0]!r} is both a parameter and a fixed flag")
        if isinstance(self.hardware.per_trial, str) and self.hardware.per_trial not in self.parameters:
            raise ValueError(f"hardware.per_trial names {self.hardware.per_trial!r}, which is not a parameter")
        return self
