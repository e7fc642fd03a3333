"""Define-by-run sampling of a space's parameters, and the constraints between them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuner.space._constraints import Constraint, parse_constraint
from tuner.space.schema import CategoricalParam, FloatParam, IntParam, SearchSpace

if TYPE_CHECKING:  # a type only: Ray workers and `tune` commands that import the space need no optuna
    import optuna

__all__ = ["suggest", "violated_constraints"]


def suggest(trial: optuna.trial.BaseTrial, space: SearchSpace) -> dict[str, Any]:
    """Ask the trial for one value of every parameter, in the space's order; tied flags follow."""
    params: dict[str, Any] = {}
    for name, p in space.parameters.items():
        if isinstance(p, IntParam):
            params[name] = trial.suggest_int(name, p.low, p.high, step=p.step, log=p.log)
        elif isinstance(p, FloatParam):
            params[name] = trial.suggest_float(name, p.low, p.high, step=p.step, log=p.log)
        elif isinstance(p, CategoricalParam):
            params[name] = trial.suggest_categorical(name, p.choices)
    return {**params, **{flag: params[source] for flag, source in space.tied.items()}}


def violated_constraints(space: SearchSpace, params: dict[str, Any]) -> list[Constraint]:
    """Constraints of the space that ``params`` (with the fixed flags) break."""
    values = space.values(params)
    constraints = [parse_constraint(text) for text in space.constraints]
    return [c for c in constraints if not c.holds(values)]
