"""Search spaces: the schema, constraints and define-by-run sampling (loading a file and checking it
against its engine and objective set is tuner.app.prepare, above the engines)."""

from tuner.space._constraints import Constraint, parse_constraint
from tuner.space._suggest import suggest, violated_constraints
from tuner.space.schema import (
    Budget,
    CategoricalParam,
    ConfirmProbeSpec,
    FloatParam,
    Hardware,
    IntParam,
    LoadProbeSpec,
    ModelSpec,
    OverloadProbeSpec,
    ProbesSpec,
    RecallProbeSpec,
    RemeasureSpec,
    SamplerSpec,
    SearchSpace,
    ServerSpec,
    SloProbeSpec,
    SloTargets,
)

__all__ = [
    "Budget",
    "CategoricalParam",
    "ConfirmProbeSpec",
    "Constraint",
    "FloatParam",
    "Hardware",
    "IntParam",
    "LoadProbeSpec",
    "ModelSpec",
    "OverloadProbeSpec",
    "ProbesSpec",
    "RecallProbeSpec",
    "RemeasureSpec",
    "SamplerSpec",
    "SearchSpace",
    "ServerSpec",
    "SloProbeSpec",
    "SloTargets",
    "parse_constraint",
    "suggest",
    "violated_constraints",
]
