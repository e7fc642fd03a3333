"""Search spaces: the schema, loading with one-line errors, and define-by-run sampling."""

from tuner.space._constraints import Constraint, parse_constraint
from tuner.space._load import DEFAULT_SPACE, load, resolve_path, validate
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
    "DEFAULT_SPACE",
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
    "load",
    "parse_constraint",
    "resolve_path",
    "suggest",
    "validate",
    "violated_constraints",
]
