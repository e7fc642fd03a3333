"""Load and validate a search-space file; every problem is one line naming the file and key."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tuner import engines, objectives
from tuner.base.exceptions import ConfigError, SpaceError
from tuner.data import shipped
from tuner.space import SearchSpace, parse_constraint
from tuner.workload import AgenticClass, TraceClass, WorkloadSpec

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_SPACE", "load", "resolve_path", "validate"]

DEFAULT_SPACE = "cpu-llamacpp"
SPACES_DIR = shipped("search_spaces")  # inside the installed package (tuner/data/search_spaces)
_PARAM_TAGS = {"int", "float", "categorical"}


def resolve_path(name_or_path: str | None) -> Path:
    """A path as given, or a bare name looked up in ``search_spaces/`` (``.yaml`` optional)."""
    candidate = Path(name_or_path or DEFAULT_SPACE)
    if candidate.is_file():
        return candidate
    if candidate.parent == Path("."):
        for folder in (Path.cwd() / "search_spaces", SPACES_DIR):
            for name in (candidate.name, f"{candidate.name}.yaml"):
                if (folder / name).is_file():
                    return folder / name
    raise ConfigError(f"{candidate}: no such search space (looked in ./, ./search_spaces/ and {SPACES_DIR})")


def load(name_or_path: str | None = None) -> tuple[SearchSpace, Path]:
    """Parse, validate and cross-check a space; raises :class:`SpaceError` on the first problem."""
    path = resolve_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise SpaceError(str(path), where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    return validate(raw, str(path)), path


def validate(raw: Any, source: str) -> SearchSpace:
    if not isinstance(raw, dict):
        raise SpaceError(source, "", "must be a mapping of keys (engine, model, parameters, ...)")
    try:
        space = SearchSpace.model_validate(raw)
    except ValidationError as exc:
        raise _first_error(exc, source) from None
    return _cross_check(space, source)


def _first_error(exc: ValidationError, source: str) -> SpaceError:
    errors = exc.errors()
    first = errors[0]
    loc = [str(part) for i, part in enumerate(first["loc"]) if not _is_union_tag(first["loc"], i)]
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "required key is missing"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return SpaceError(source, ".".join(loc), message + more)


def _is_union_tag(loc: tuple[Any, ...], i: int) -> bool:
    return i == 2 and loc[0] == "parameters" and loc[i] in _PARAM_TAGS


def _cross_check(space: SearchSpace, source: str) -> SearchSpace:
    """Checks across keys and files; returns the space with its SLO probe's targets from the objective set."""
    try:
        adapter = engines.get(space.engine)
    except ConfigError as exc:
        raise SpaceError(source, "engine", str(exc)) from None
    if problem := adapter.model_problem(space.model.path):
        raise SpaceError(source, "model.path", problem)
    space = _workload(space, source)
    load = space.probes.load
    if load is not None and load.dataset is not None and not Path(load.dataset).is_file():
        raise SpaceError(source, "probes.load.dataset", f"dataset file {load.dataset!r} does not exist")
    known = set(space.parameters) | set(space.server.flags)
    for i, text in enumerate(space.constraints):
        try:
            constraint = parse_constraint(text)
        except ValueError as exc:
            raise SpaceError(source, f"constraints[{i}]", str(exc)) from None
        unknown = sorted(constraint.names - known)
        if unknown:
            raise SpaceError(source, f"constraints[{i}]", f"unknown parameter {unknown[0]!r}")
    for i, params in enumerate(space.enqueue):
        for name, value in params.items():
            if name not in space.parameters:
                raise SpaceError(source, f"enqueue[{i}].{name}", "not a parameter of this space")
            if not space.parameters[name].contains(value):
                raise SpaceError(source, f"enqueue[{i}].{name}", f"{value!r} is outside the parameter's range")
    try:
        objective = objectives.load(space.objectives)
    except ConfigError as exc:
        raise SpaceError(source, "objectives", str(exc)) from None
    available = objectives.available_metrics(space)
    for key, metric in objective.metric_refs():
        if metric not in available:
            hint = " (add `slo: {}` under probes: the SLO probe measures slo.*)" if metric.startswith("slo.") else ""
            raise SpaceError(
                source, "objectives", f"{objective.name}: {key} uses {metric!r}, which this space's probes do not measure{hint}"
            )
    space = _slo_targets(space, objective, source)
    graphs_off = [k for k in adapter.graphs_off_flags if space.server.flags.get(k) or k in space.parameters]
    if graphs_off and space.hardware.kind == "gpu":
        logger.warning(
            "%s: server.flags.%s: trials measure without CUDA graphs, which no deployment serves with "
            "(on the H200 eager mode served a third of the tokens of the same config with graphs: docs/noise.md)",
            source,
            graphs_off[0],
        )
    throughput = objective.index_of("throughput")
    per_trial = space.hardware.per_trial
    sized = isinstance(per_trial, str) and space.hardware.kind == "gpu"
    if sized and throughput is not None and "_per_gpu" not in (metric := objective.objectives[throughput].metric):
        logger.warning(
            "%s: objectives: the trial size varies with %r but %s is per server: a config on more GPUs "
            "looks faster while the node holds fewer of them (load.output_tok_s_per_gpu ranks them: "
            "objectives throughput-per-gpu-slo or throughput-per-gpu-vs-context)",
            source,
            per_trial,
            metric,
        )
    return space


def _workload(space: SearchSpace, source: str) -> SearchSpace:
    """The space's ``workload:`` read (a file's path, or written inline) and checked: its traces
    read line by line (a bad line: ``FILE:LINE: what``) and fingerprinted, their paths made
    absolute (a Ray worker runs elsewhere); relative paths are from the current folder, else from
    the file that names them (the workload file, or the space where it is written inline)."""
    raw = space.workload
    if raw is None:
        return space
    where, key, folder = source, "workload.", Path(source).parent
    if isinstance(raw, str):
        path = Path(raw) if Path(raw).is_file() else Path(source).parent / raw
        if not path.is_file():
            raise SpaceError(source, "workload", f"workload file {raw!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise SpaceError(str(path), f"line {mark.line + 1}" if mark else "", "not valid YAML") from None
        try:
            raw = WorkloadSpec.model_validate(data if isinstance(data, dict) else {"classes": data})
        except ValidationError as exc:
            raise _first_error(exc, str(path)) from None
        where, key, folder = str(path), "", path.parent
    classes = []
    for i, kind in enumerate(raw.classes):
        for name in ("prompt", "output", "turns", "user", "think"):
            dist = getattr(kind, name, None)
            if dist is not None and isinstance(dist.empirical, str):
                found = _found(dist.empirical, folder)
                if found is None:
                    raise SpaceError(where, f"{key}classes[{i}].{name}.empirical", f"file {dist.empirical!r} does not exist")
                kind = kind.model_copy(update={name: dist.model_copy(update={"empirical": str(found)})})
        if isinstance(kind, TraceClass):
            trace = _found(kind.trace, folder)
            if trace is None:
                raise SpaceError(where, f"{key}classes[{i}].trace", f"trace file {kind.trace!r} does not exist")
            # fingerprinted() reads it: every line checked, a TraceError naming the file and the line
            kind = kind.model_copy(update={"trace": str(trace)}).fingerprinted()
        if isinstance(kind, AgenticClass):
            found = _found(kind.agentic, folder)
            if found is None:
                raise SpaceError(where, f"{key}classes[{i}].agentic", f"agentic trace {kind.agentic!r} does not exist")
            # fingerprinted() reads it: every turn checked, a TraceError naming the file and the turn
            kind = kind.model_copy(update={"agentic": str(found)}).fingerprinted()
        classes.append(kind)
    return space.model_copy(update={"workload": raw.model_copy(update={"classes": classes})})


def _found(name: str, folder: Path) -> Path | None:
    for candidate in (Path(name), folder / name):
        if candidate.is_file():
            return candidate.resolve()
    return None


HOLD_S = {"gpu": 60.0, "cpu": 0.0}  # the answer's hold level by hardware kind (probes.slo.hold unset)
HORIZON_S = 600.0  # how long an answer must hold where the space confirms none (MLPerf LoadGen's minimum run)


def _hold_defaults(space: SearchSpace, spec: Any) -> dict[str, float]:
    """probes.slo's hold, hold_max and horizon where the space leaves them out: a GPU space holds
    its answer 60 s (up to 3 x that while undecided), a CPU space does not (the embedded default
    stays fast); the horizon is the space's confirmation length, else 10 minutes."""
    hold = spec.hold if spec.hold is not None else HOLD_S[space.hardware.kind]
    return {
        "hold": hold,
        "hold_max": spec.hold_max if spec.hold_max is not None else 3 * hold,
        "horizon": spec.horizon or space.remeasure.confirm or HORIZON_S,
    }


def _slo_targets(space: SearchSpace, objective: objectives.ObjectiveSet, source: str) -> SearchSpace:
    """The SLO is written once, in the objective set: the space's SLO and confirmation probes get
    their targets here (and keep them in the study's stored space); a space that states other
    targets is refused."""
    update = {}
    for key in ("slo", "confirm"):
        spec = getattr(space.probes, key)
        if spec is None:
            continue
        if objective.slo is None:
            raise SpaceError(
                source, f"probes.{key}", f"objective set {objective.name!r} states no slo (ttft_p99, itl_p99, tpot_p99) to hold"
            )
        if spec.targets is not None and spec.targets != objective.slo:
            raise SpaceError(
                source, f"probes.{key}.targets", f"differ from objective set {objective.name!r}'s slo: write the SLO once, there"
            )
        update[key] = spec.model_copy(update={"targets": objective.slo, **(_hold_defaults(space, spec) if key == "slo" else {})})
    if not update:
        return space
    return space.model_copy(update={"probes": space.probes.model_copy(update=update)})
