"""Validation of search spaces: every problem is one line naming the file, the key path, the problem."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, tiny_space
from tuner import engines
from tuner.app import prepare
from tuner.base.exceptions import ConfigError, SpaceError


def _mutate(path: str, value: object) -> dict:
    raw = copy.deepcopy(tiny_space())
    raw["parameters"]["batch-size"] = {"type": "categorical", "choices": [256, 512]}
    node = raw
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return raw


_DELETE = object()

MALFORMED = [
    # (mutation path, value, expected key path, expected words in the problem)
    ("bogus", 1, "bogus", "unknown key"),
    ("server.bogus", 1, "server.bogus", "unknown key"),
    ("engine", "tgi", "engine", "not registered"),
    ("engine", _DELETE, "engine", "required key is missing"),
    ("model", _DELETE, "model", "required key is missing"),
    ("model.path", "/no/such/model.gguf", "model.path", "does not exist"),
    ("model.path", "model.gguf; rm -rf /", "model.path", "shell metacharacters"),
    ("model.path", "builtin:llama-70b", "model.path", "unknown builtin model"),
    ("parameters.ctx-size", {"type": "int", "low": 8192, "high": 1024}, "parameters.ctx-size", "low (8192) > high (1024)"),
    ("parameters.ctx-size", {"type": "int", "low": "big", "high": 1024}, "parameters.ctx-size.low", "integer"),
    ("parameters.ctx-size", {"type": "int", "low": 0, "high": 8, "log": True}, "parameters.ctx-size", "low > 0"),
    ("parameters.ctx-size", {"type": "dice", "low": 1}, "parameters.ctx-size", "type"),
    ("parameters.ctx-size", {"type": "categorical", "choices": []}, "parameters.ctx-size.choices", "at least 1"),
    ("parameters.ctx-size", {"type": "int", "low": 1, "high": 9, "stride": 2}, "parameters.ctx-size.stride", "unknown key"),
    ("parameters", {}, "parameters", "at least 1"),
    ("constraints", ["ubatch-size <= batch-size"], "constraints[0]", "unknown parameter 'ubatch-size'"),
    ("constraints", ["batch-size <=> 4"], "constraints[0]", "constraint"),
    ("probes.load.concurrency", [0], "probes.load.concurrency.0", "greater than or equal to 1"),
    ("probes.load.target", 64, "probes.load", "not one of concurrency"),
    ("probes.load.request", {"max_tokens": 5, "top_p": 0.9}, "probes.load.request", "max_tokens, which the probe owns"),
    ("probes.load.request", "greedy", "probes.load.request", "dictionary"),
    ("probes.recall", {"lengths": [4096, 1024]}, "probes.recall.lengths", "ascending"),
    ("objectives", "speed-at-all-costs", "objectives", "unknown objective set"),
    ("objectives", "throughput-vs-context", "objectives", "recall.effective_context"),
    ("budget.trials", 0, "budget.trials", "greater than or equal to 1"),
    ("budget.timeout", "eight hours", "budget.timeout", "not a duration"),
    ("server.memory_cap", "lots", "server.memory_cap", "not a size"),
    ("server.flags", {"--ctx size": 1}, "server.flags", "flag name"),
    ("hardware.per_trial", 4, "hardware", "between 1 and 1"),
    ("hardware.per_trial", "tp", "", "not a parameter"),
    ("hardware.kind", "tpu", "hardware.kind", "'cpu' or 'gpu'"),
    ("enqueue", [{"ctx-size": 999}], "enqueue[0].ctx-size", "outside the parameter's range"),
    ("enqueue", [{"threads": 2}], "enqueue[0].threads", "not a parameter"),
]


@pytest.mark.parametrize(
    ("where", "value", "key", "words"), MALFORMED, ids=[m[0] + ":" + str(i) for i, m in enumerate(MALFORMED)]
)
def test_malformed_space_names_file_key_and_problem(where: str, value: object, key: str, words: str) -> None:
    with pytest.raises(SpaceError) as info:
        prepare.validate(_mutate(where, value), "bad.yaml")
    err = info.value
    assert err.path == "bad.yaml"
    assert err.key == key, str(err)
    assert words in err.problem, str(err)
    assert "\n" not in str(err)


def test_not_yaml_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("engine: llamacpp\nparameters: [unclosed\n")
    with pytest.raises(SpaceError, match=r"broken.yaml: line \d+: not valid YAML"):
        prepare.load(str(bad))


def test_not_a_mapping(tmp_path: Path) -> None:
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(SpaceError, match="must be a mapping"):
        prepare.load(str(bad))


def test_unknown_space_name() -> None:
    with pytest.raises(ConfigError, match="no such search space"):
        prepare.load("no-such-space")


@pytest.mark.parametrize("name", ["cpu-llamacpp", "b300", "search_spaces/b300.yaml"])
def test_shipped_spaces_validate(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    space, path = prepare.load(name)
    assert path.is_file()
    assert space.parameters


def test_a_mixed_trial_size_ranked_per_server_is_warned(caplog: pytest.LogCaptureFixture) -> None:
    """b300 mixes tp 4 and 8: per-server tok/s would favour the server on more GPUs; the shipped
    space ranks per GPU and is not warned about."""
    path = str(ROOT / "search_spaces" / "b300.yaml")  # its workload file is found beside it
    raw = yaml.safe_load(Path(path).read_text())
    with caplog.at_level(logging.WARNING, logger="tuner.app.prepare"):
        prepare.validate(raw, path)
        assert not caplog.records
        prepare.validate({**raw, "objectives": "throughput-vs-context"}, path)
    assert "b300.yaml: objectives: the trial size varies with 'tp' but load.output_tok_s is per server" in caplog.text


def test_throughput_per_gpu_is_for_gpu_spaces() -> None:
    raw = yaml.safe_load((ROOT / "search_spaces" / "cpu-llamacpp.yaml").read_text())
    with pytest.raises(
        SpaceError,
        match=r"cpu-llamacpp.yaml: objectives: .*'load.output_tok_s_per_gpu', which this space's probes do not measure",
    ):
        prepare.validate({**raw, "objectives": "throughput-per-gpu-slo"}, "cpu-llamacpp.yaml")


def test_default_space_is_cpu_llamacpp() -> None:
    space, path = prepare.load(None)
    assert path.name == "cpu-llamacpp.yaml"
    assert space.engine == "llamacpp"


def test_b300_has_the_knobs_users_turn() -> None:
    space, _ = prepare.load("b300")
    assert space.engine == "sglang"
    p = space.parameters
    assert (p["mem-fraction-static"].low, p["mem-fraction-static"].high) == (0.60, 0.92)
    assert min(p["context-length"].choices) == 131072 and max(p["context-length"].choices) == 1048576
    assert set(p["tp"].choices) == {4, 8}
    assert space.hardware.per_trial == "tp" and len(space.hardware.devices) == 8


def test_units_in_space_are_parsed() -> None:
    raw = yaml.safe_load((ROOT / "search_spaces" / "cpu-llamacpp.yaml").read_text())
    space = prepare.validate(raw, "cpu-llamacpp.yaml")
    assert space.server.memory_cap == 2**30
    assert space.budget.timeout == 1800.0


@pytest.mark.parametrize("name", ["h200-vllm", "h200-sglang"])
def test_h200_spaces_validate_with_their_model_dir(name: str, tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "search_spaces" / f"{name}.yaml").read_text())
    assert raw["model"]["path"] == "/tmp/model"  # laid out by shared/gpu's installer on the H200
    raw["model"]["path"] = str(tmp_path)
    space = prepare.validate(raw, f"{name}.yaml")
    assert space.objectives == "throughput-slo" and len(space.enqueue) == 3


def test_the_x2_space_mixes_tp_sizes_that_pack_both_gpus(tmp_path: Path) -> None:
    """tp 1 and tp 2 trials on 2 GPUs (issue 14's lent-kind part): two tp-1 trials side by side,
    a tp-2 trial waits for both, first fit."""
    from tuner.host.partitions import PartitionPool, trial_size

    raw = yaml.safe_load((ROOT / "search_spaces" / "h200-x2-tp.yaml").read_text())
    raw["model"]["path"] = str(tmp_path)
    space = prepare.validate(raw, "h200-x2-tp.yaml")
    sizes = [trial_size(space.hardware.per_trial, e) for e in space.enqueue]
    assert sizes == [1, 2]
    pool = PartitionPool("gpu", space.hardware.devices)
    one, other = pool.acquire(1), pool.acquire(1)
    assert (one.devices, other.devices) == ((0,), (1,)) and pool.acquire(2) is None and one.port_base != other.port_base
    pool.release(one)
    assert pool.acquire(2) is None  # GPU 1 is still busy
    pool.release(other)
    assert pool.acquire(2).devices == (0, 1)


GPU_SPACES = sorted(
    p for p in (ROOT / "search_spaces").glob("*.yaml") if yaml.safe_load(p.read_text())["hardware"]["kind"] == "gpu"
)


@pytest.mark.parametrize("path", GPU_SPACES, ids=lambda p: p.stem)
def test_every_shipped_gpu_space_measures_with_cuda_graphs(path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Users serve with CUDA graphs (and vLLM's compile) on; in eager mode the H200 served a third
    of the tokens of the same config (docs/noise.md). No shipped GPU space turns them off; one that
    does is warned."""
    raw = yaml.safe_load(path.read_text())
    raw["model"]["path"] = str(tmp_path)  # laid out on the H200 by the installers
    with caplog.at_level(logging.WARNING, logger="tuner.app.prepare"):
        space = prepare.validate(raw, str(path))  # the space's own path: its workload file is found beside it
        assert not [r for r in caplog.records if "CUDA graphs" in r.getMessage()], caplog.text
        off = engines.get(space.engine).graphs_off_flags[0]
        prepare.validate({**raw, "server": {**raw["server"], "flags": {**raw["server"]["flags"], off: True}}}, str(path))
    assert f"{path}: server.flags.{off}: trials measure without CUDA graphs" in caplog.text


def test_the_slo_is_written_once_in_the_objective_set_and_reaches_the_probe() -> None:
    from tuner import objectives

    space, _ = prepare.load("cpu-llamacpp")
    assert space.probes.slo is not None and space.probes.slo.targets == objectives.load("goodput-vs-context-cpu").slo
    raw = tiny_space(objectives="goodput-vs-context-cpu")
    raw["probes"]["recall"] = {"lengths": [1024]}
    raw["probes"]["slo"] = {"targets": {"ttft_p99": 9.0}}
    with pytest.raises(SpaceError, match=r"t.yaml: probes.slo.targets: differ from objective set 'goodput-vs-context-cpu''s slo"):
        prepare.validate(raw, "t.yaml")
    raw["probes"]["slo"] = {}
    raw["objectives"] = "throughput"
    with pytest.raises(SpaceError, match=r"t.yaml: probes.slo: objective set 'throughput' states no slo"):
        prepare.validate(raw, "t.yaml")
    del raw["probes"]["slo"]
    raw["objectives"] = "goodput-vs-context-cpu"
    with pytest.raises(SpaceError, match=r"'slo.goodput', which this space's probes do not measure \(add `slo: \{\}` under"):
        prepare.validate(raw, "t.yaml")


def test_a_trial_timeout_shorter_than_the_trials_longest_plan_is_said_before_the_run(tmp_path: Path) -> None:
    """A search that may hold the level above its answer and the answer itself (up to ``holds``
    holds at ``hold_max``) outruns a trial_timeout sized for one hold: the dry run and the run say
    so in one line, before any server starts."""
    from tuner.orchestration.dryrun import trial_timeout_line

    raw = tiny_space(objectives="goodput-vs-context-rate")
    raw["probes"]["recall"] = {"lengths": [128], "depths": [0.5]}
    raw["probes"]["slo"] = {"mode": "rate", "start_rate": 1, "max_levels": 7, "hold": "60s", "hold_max": "180s"}
    raw["budget"] = {"trials": 1, "trial_timeout": "8m"}
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(raw))
    space, _ = prepare.load(str(tmp_path / "short.yaml"))
    line = trial_timeout_line(space)
    assert line is not None and line.startswith("note: budget.trial_timeout 8m00s is shorter than the longest trial")
    assert "7 SLO levels, 3 holds of up to 3m00s" in line, line
    raw["budget"]["trial_timeout"] = "20m"
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(raw))
    assert trial_timeout_line(prepare.load(str(tmp_path / "long.yaml"))[0]) is None
    raw["budget"] = {"trials": 1}
    (tmp_path / "none.yaml").write_text(yaml.safe_dump(raw))
    assert trial_timeout_line(prepare.load(str(tmp_path / "none.yaml"))[0]) is None
