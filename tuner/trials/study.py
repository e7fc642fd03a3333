"""Open or resume an Optuna study for a space; the space is stored with the study."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import optuna

from tuner import engines
from tuner.base.exceptions import ConfigError
from tuner.objectives import ObjectiveSet
from tuner.space import SearchSpace
from tuner.trials import connect, enqueue, read_study, save_noise_prior, store_setup

__all__ = ["make_sampler", "open_study", "resume_seed", "space_fingerprint"]

logger = logging.getLogger(__name__)


def space_fingerprint(space: SearchSpace) -> str:
    """A digest of the validated space, independent of YAML formatting and comments. A workload's
    trace counts by its content (sha256) and name, not the folder it was found in (made absolute
    when the space loads): a study resumed from another checkout is the same study."""
    canonical = json.dumps(_canonical(space.model_dump(mode="json")), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _canonical(dumped: dict[str, Any]) -> dict[str, Any]:
    """A copy of a dumped space with each fingerprinted trace named by its file name alone."""
    dumped = copy.deepcopy(dumped)
    for kind in (dumped.get("workload") or {}).get("classes", []) if isinstance(dumped.get("workload"), dict) else []:
        for key in ("trace", "agentic"):
            if kind.get("sha256") and isinstance(kind.get(key), str):
                kind[key] = Path(kind[key]).name
    return dumped


def differences(stored: Any, current: Any, at: str = "") -> list[str]:
    """The dotted keys where two dumped spaces differ (a key one lacks counts), in order: what a
    refused resume names, also where the space file is unchanged and a newer tuner's schema added
    a field or the probe's requests changed."""
    if isinstance(stored, dict) and isinstance(current, dict):
        found: list[str] = []
        for key in [*stored, *(k for k in current if k not in stored)]:
            found += differences(stored.get(key, _MISSING), current.get(key, _MISSING), f"{at}.{key}" if at else key)
        return found
    return [] if stored == current else [at or "(the whole space)"]


_MISSING = object()


def make_sampler(space: SearchSpace, *, name: str | None = None, seed: int | None = None) -> optuna.samplers.BaseSampler:
    spec = space.sampler
    name = name or spec.name
    seed = spec.seed if seed is None else seed
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.startup_trials, multivariate=True, constant_liar=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=spec.startup_trials)
    raise ConfigError(f"unknown sampler {name!r}; available: ['gp', 'nsga2', 'random', 'tpe']")


def resume_seed(seed: int | None, trials: int) -> int | None:
    """The sampler seed of a study resumed with ``trials`` trials (None stays unseeded)."""
    return None if seed is None else (seed * 1_000_003 + trials) % 2**32


def open_study(
    space: SearchSpace,
    objective: ObjectiveSet,
    *,
    name: str,
    storage: str,
    source: str,
    force: bool = False,
    sampler: str | None = None,
) -> optuna.Study:
    """Create the study, or resume it when it exists with the same space.

    A different space is refused unless ``force``; then the new space is stored and the study
    goes on (earlier trials keep their own params)."""
    study = optuna.create_study(
        study_name=name,
        storage=connect(storage),
        directions=objective.directions,
        sampler=make_sampler(space, name=sampler),
        load_if_exists=True,
    )
    if [d.name.lower() for d in study.directions] != objective.directions:
        raise ConfigError(
            f"study {name!r} optimizes {len(study.directions)} objectives, "
            f"but objective set {objective.name!r} has {len(objective.directions)}: use another --study"
        )
    if done := len(study.get_trials(deepcopy=False)):
        # A resumed study must not replay its start-up sequence (a seeded sampler in a new process
        # proposes trial 0's config again): seed it from the stored seed and the trials so far,
        # so a resume is still reproducible but continues the search.
        study.sampler = make_sampler(space, name=sampler, seed=resume_seed(space.sampler.seed, done))
    fingerprint = space_fingerprint(space)
    record = read_study(study, trials=False)
    stored = record.fingerprint
    if stored is not None and stored != fingerprint and not force:
        changed = differences(_canonical(dict(record.space or {})), _canonical(space.model_dump(mode="json")))
        said = f": {', '.join(changed[:4])}{' ...' if len(changed) > 4 else ''} differ" if changed else ""
        raise ConfigError(
            f"study {name!r} was created with a different space "
            f"({record.space_file}{said}); rerun with --force to continue it with {source}, "
            "or choose another --study"
        )
    if stored is None:
        for params in space.enqueue:  # known configs first (e.g. today's production config)
            enqueue(study, params, from_space=True)
    if stored != fingerprint:
        if stored is not None:
            logger.warning("study %s: space changed (forced); continuing with %s", name, source)
        store_setup(
            study,
            fingerprint=fingerprint,
            space=space.model_dump(mode="json"),
            source=source,
            objectives=objective.model_dump(mode="json"),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(objective.metric_names)
    prior = engines.get(space.engine).fresh_server_spread.get(space.hardware.kind)
    if prior is not None and record.noise_prior != prior.to_dict():
        save_noise_prior(study, prior.to_dict())
    return study
