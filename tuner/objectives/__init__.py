"""Objectives: named sets of metrics with directions, plus constraints, from ``objectives/*.yaml``.

A metric is ``<probe>.<name>`` as a :class:`~tuner.base.records.TrialOutcome` reports it, e.g.
``load.output_tok_s@32`` or ``recall.effective_context``. Constraints are ``<metric> <op> <number>``
and reach Optuna as constraint values (<= 0 feasible), so the sampler learns them.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tuner.base.exceptions import ConfigError
from tuner.base.metrics import CAPACITY_CONTEXT_PER_REQUEST
from tuner.data import shipped
from tuner.space.schema import SloTargets

if TYPE_CHECKING:
    from tuner.base.records import TrialOutcome
    from tuner.space import SearchSpace

__all__ = ["CONFIGURED_CONTEXT", "Evaluation", "Objective", "ObjectiveSet", "available_metrics", "load", "role_of"]

OBJECTIVES_DIR = shipped("objectives")  # inside the installed package (tuner/data/objectives)
_CONSTRAINT = re.compile(r"^\s*([A-Za-z0-9_.@-]+)\s*(<=|>=|==|<|>)\s*(-?[0-9.]+(?:e-?\d+)?)\s*$")
_OPS = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "<": operator.lt, ">": operator.gt}


Role = Literal["throughput", "context", "energy", "capacity", "latency"]
# Where an objective set does not say, a metric's role follows from its name.
_ROLE_OF = (
    (re.compile(r"^load\.(output|total)_tok_s(_per_gpu)?(@\d+)?$"), "throughput"),
    (re.compile(r"^slo\.goodput(_per_gpu)?$"), "throughput"),
    (re.compile(r"^(recall\.effective_context|served\.context|capacity\.context_per_request)$"), "context"),
    (re.compile(r"^telemetry\.tokens_per_joule(@\d+)?$"), "energy"),
    (re.compile(r"^capacity\.(kv_tokens|max_running_requests)$"), "capacity"),
    (re.compile(r"^load\.(ttft|tpot|itl|e2e)_p\d+(@\d+)?$"), "latency"),
)
# The context a config serves, where no objective has the context role: what the engine was
# configured to serve per request (not recall-verified: say so where it is shown).
CONFIGURED_CONTEXT = CAPACITY_CONTEXT_PER_REQUEST


def role_of(metric: str) -> str | None:
    return next((role for pattern, role in _ROLE_OF if pattern.match(metric)), None)


class Objective(BaseModel):
    """One objective; ``role`` says what it stands for (picks, ``--min-context``, `tune limits`
    and the report find throughput and context by role, never by position)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str
    direction: Literal["maximize", "minimize"]
    role: Role | None = None

    @model_validator(mode="after")
    def _infer_role(self) -> Objective:
        if self.role is None and (role := role_of(self.metric)) is not None:
            object.__setattr__(self, "role", role)
        return self


class MetricConstraint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    metric: str
    op: str
    bound: float

    def violation(self, value: float | None) -> float:
        """Optuna's convention: <= 0 is feasible; a missing value is a full violation."""
        if value is None:
            return 1.0
        if _OPS[self.op](value, self.bound):
            return 0.0
        return abs(value - self.bound) / max(abs(self.bound), 1.0) or 1e-9

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.bound:g}"


class Evaluation(BaseModel):
    model_config = ConfigDict(frozen=True)
    values: tuple[float, ...]
    violations: tuple[float, ...]
    violated: tuple[str, ...]

    @property
    def feasible(self) -> bool:
        return not self.violated


class ObjectiveSet(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    objectives: list[Objective] = Field(min_length=1)
    constraints: list[MetricConstraint] = Field(default_factory=list)
    # what a config must hold at a load to count as serving it: read by the SLO probe (the space's
    # probes.slo gets these targets when it is loaded) and by constraints on slo.* metrics
    slo: SloTargets | None = None

    @field_validator("constraints", mode="before")
    @classmethod
    def _parse(cls, items: list[object]) -> list[object]:
        parsed = []
        for item in items or []:
            if isinstance(item, str):
                match = _CONSTRAINT.match(item)
                if not match:
                    raise ValueError(f"constraint {item!r} is not '<metric> <op> <number>'")
                item = {"metric": match[1], "op": match[2], "bound": float(match[3])}
            parsed.append(item)
        return parsed

    @model_validator(mode="after")
    def _one_per_role(self) -> ObjectiveSet:
        roles = [o.role for o in self.objectives if o.role]
        if len(roles) != len(set(roles)):
            raise ValueError(f"two objectives share a role: {roles}")
        return self

    def index_of(self, role: str) -> int | None:
        """The position of the objective with ``role``, if any."""
        return next((i for i, o in enumerate(self.objectives) if o.role == role), None)

    @property
    def directions(self) -> list[Literal["maximize", "minimize"]]:
        return [o.direction for o in self.objectives]

    @property
    def metric_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    def metric_refs(self) -> Iterator[tuple[str, str]]:
        for i, o in enumerate(self.objectives):
            yield f"objectives[{i}]", o.metric
        for i, c in enumerate(self.constraints):
            yield f"constraints[{i}]", c.metric

    def evaluate(self, outcome: TrialOutcome) -> Evaluation:
        """Objective values and constraint violations of a served trial.

        A missing objective metric is an error of the probes (never a silent zero)."""
        metrics = outcome.metrics()
        missing = [m for m in self.metric_names if m not in metrics]
        if missing:
            raise KeyError(f"the probes did not report {missing}")
        violations = tuple(c.violation(metrics.get(c.metric)) for c in self.constraints)
        violated = tuple(str(c) for c, v in zip(self.constraints, violations, strict=True) if v > 0)
        return Evaluation(values=tuple(metrics[m] for m in self.metric_names), violations=violations, violated=violated)


def load(name: str) -> ObjectiveSet:
    """The objective set ``name``: a path as given, else ``<name>.yaml`` in ./objectives/ of the
    working directory, else the one shipped with tuner."""
    path = Path(name)
    folders = (Path.cwd() / "objectives", OBJECTIVES_DIR)
    if not path.is_file():
        path = next((f / f"{name}.yaml" for f in folders if (f / f"{name}.yaml").is_file()), path)
    if not path.is_file():
        known = sorted({p.stem for f in folders for p in f.glob("*.yaml")})
        raise ConfigError(
            f"unknown objective set {name!r} (looked in ./, ./objectives/ and {OBJECTIVES_DIR}); available: {known}"
        )
    try:
        return ObjectiveSet.model_validate(yaml.safe_load(path.read_text()))
    except (ValidationError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None


def available_metrics(space: SearchSpace) -> set[str]:
    """Every metric name the space's probes can report."""
    from tuner.probes import metric_names

    return metric_names(space)
