"""Benchmark: how many trials each search strategy needs, replayed against measured tables.

1. CPU table (real): every config of a discretized llama.cpp space is measured once on the real
   llama-server under the 1 GiB memory cap (startup failures included) and cached in
   docs/data/search-tables/cpu-llamacpp-grid.json (`--measure` rebuilds it; commit it). The context axis is the
   engine-reported per-request context (recall is skipped: ~20 s per config would make the table
   cost hours); throughput is streamed output tok/s at concurrency 4.
2. GPU table (SIMULATION, labelled so): vLLM-style, one H200, an 8B model, a long-context
   workload (1024 clients, 4000 tokens in, 96 out):
     buffers_gb = 1.5 + 0.004 * max_num_seqs + 0.5 * max_model_len / 32768   (graphs, activations
                  and buffers sized by the maximum context)
     kv_tokens  = (util * 141 - 16 - buffers_gb) GB / 128 KiB per token
     fails if kv_tokens <= 0 (no KV memory) or kv_tokens < max_model_len (model length exceeds KV)
     batch      = min(max_num_seqs, kv_tokens // 4096, 1024)
     step_s     = (16 GB + batch * 4096 * 128 KiB) / 4.8 TB/s + 2 ms    (decode reads weights + KV)
     output tok/s = batch / step_s
A trial is a lookup. Strategies: ours (multi-objective TPE with constraints, pre-screen and
no repeated launches, through tuner's own Driver), random (Optuna RandomSampler through the same
Driver, no screen), grid order, and vLLM auto_tune.sh's strategy (per combination of the other
knobs, lower the memory knob until the server starts, then measure; its grid over the rest).
Reported over seeds: median launches to reach 95 % of the exhaustive front's hypervolume and
95 % of the best throughput at context >= X; wasted launches (configs that failed to start);
pre-screen false skips (skipped configs that would have started).

    python benchmarks/search_efficiency.py [--measure] [--seeds 20] [--out docs/search-efficiency.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tuner.app.prepare import validate
from tuner.base.artifacts import RunDir
from tuner.base.evidence import Evidence
from tuner.base.exceptions import ConfigInfeasible, StartupFailed
from tuner.base.records import Capacity, ProbeResult, Timings, TrialOutcome
from tuner.engines import vllm
from tuner.engines.memory import MemoryModel
from tuner.objectives import ObjectiveSet
from tuner.orchestration.driver import Driver
from tuner.results.pick import hypervolume_2d
from tuner.results.screen import Screen, screen_for
from tuner.serving.server import end_servers_on_sigterm
from tuner.trials import read_trials

TABLES = ROOT / "docs" / "data" / "search-tables"  # committed: the figures in docs/ replay from a clone
BUDGET = 120
OBJECTIVE = ObjectiveSet.model_validate(
    {
        "name": "throughput-vs-capacity-context",
        "objectives": [
            {"metric": "load.output_tok_s", "direction": "maximize"},
            {"metric": "capacity.context_per_request", "direction": "maximize"},
        ],
    }
)

CPU_GRID = {
    "ctx-size": [2048, 4096, 8192, 16384, 32768, 65536],
    "parallel": [1, 2, 4],
    "cache-type-k": ["f16", "q8_0", "q4_0"],
    "threads": [1, 2],
}
GPU_GRID = {
    "gpu-memory-utilization": [round(0.05 * i, 2) for i in range(2, 20)],  # 0.10 .. 0.95
    "max-model-len": [8192, 32768, 131072, 262144, 524288, 1048576],
    "max-num-seqs": [32, 64, 128, 256, 512],
}


@dataclass(frozen=True)
class Table:
    name: str
    engine: str
    grid: dict[str, list[Any]]
    memory_knob: str  # the knob auto_tune.sh lowers until the server starts
    descending: bool  # lowering memory = going down this list (True) or up (False)
    rows: dict[str, dict[str, Any]]  # key(params) -> {"ok": bool, "tok_s", "context", "kv_tokens", "signature", "details"}
    context_floor: int
    memory: MemoryModel | None = None  # the screen's memory model, where the table's engine is not the adapter's

    def key(self, params: dict[str, Any]) -> str:
        return json.dumps({k: params[k] for k in self.grid}, sort_keys=True)

    def configs(self) -> list[dict[str, Any]]:
        names = list(self.grid)
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*self.grid.values())]


# ---------------------------------------------------------------- measuring the CPU table (real)
def measure_cpu_table(path: Path) -> None:
    from tests.conftest import tiny_space
    from tuner.host.partitions import make_partitions
    from tuner.serving.trial import run_trial

    raw = tiny_space(name="grid")
    raw["parameters"] = {k: {"type": "categorical", "choices": v} for k, v in CPU_GRID.items()}
    del raw["server"]["flags"]["threads"]  # a parameter here
    raw["probes"]["load"] = {"concurrency": [4], "prompt_tokens": 64, "output_tokens": 24, "requests": 8, "warmup": 1}
    space = validate(raw, "grid.yaml")
    partition = make_partitions("cpu", [0, 1], 2)[0]
    rows = {}
    configs = Table("cpu", "llamacpp", CPU_GRID, "ctx-size", True, {}, 0).configs()
    with tempfile.TemporaryDirectory() as tmp:
        for i, params in enumerate(configs):
            params = {**params, "cache-type-v": params["cache-type-k"]}
            began = time.monotonic()
            try:
                outcome = run_trial(space, params, Path(tmp) / str(i), partition)
                m = outcome.metrics()
                row = {
                    "ok": True,
                    "tok_s": m["load.output_tok_s"],
                    "context": m["capacity.context_per_request"],
                    "kv_tokens": m.get("capacity.kv_tokens"),
                }
            except ConfigInfeasible as exc:
                row = {"ok": False, "signature": exc.evidence.signature, "details": exc.evidence.details}
            rows[json.dumps({k: params[k] for k in CPU_GRID}, sort_keys=True)] = row
            print(
                f"[{i + 1}/{len(configs)}] {params} -> {row.get('tok_s', row.get('signature'))} "
                f"({time.monotonic() - began:.1f}s)",
                flush=True,
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"grid": CPU_GRID, "rows": rows, "measured": time.strftime("%Y-%m-%d %H:%M")}, indent=1))


def cpu_table() -> Table:
    data = json.loads((TABLES / "cpu-llamacpp-grid.json").read_text())
    return Table("CPU llama.cpp (measured)", "llamacpp", CPU_GRID, "ctx-size", True, data["rows"], 8192)


# ---------------------------------------------------------------- the GPU table (measured on the H200)
def h200_table() -> Table:
    """benchmarks/gpu_table.py's table of benchmarks/spaces/h200-vllm-grid.yaml (scripts/h200-grid.sh)."""
    data = json.loads((TABLES / "h200-vllm-grid.json").read_text())
    if data["unmeasured"]:
        sys.exit(
            f"error: the H200 table has {len(data['rows'])} of {len(data['rows']) + len(data['unmeasured'])} configs measured: "
            "a search replayed on it would look up configs nobody measured; resume it with scripts/h200-grid.sh"
        )
    return Table(
        "H200 vLLM 0.26 (measured, SmolLM2 real weights, graphs on)",
        "vllm",
        data["grid"],
        "gpu-memory-utilization",
        True,
        data["rows"],
        16384,
    )


# ---------------------------------------------------------------- the GPU table (simulation)
def gpu_table() -> Table:
    gb, kib = 1e9, 1024
    rows = {}
    # its buffers grow with max-model-len (real vLLM 0.26's pool does not: the h200 table), so the
    # screen is told the pool shrinks with the length
    memory = dataclasses.replace(vllm.MEMORY, pool_independent_of_length=False)
    t = Table("GPU vLLM (SIMULATION)", "vllm", GPU_GRID, "gpu-memory-utilization", True, rows, 131072, memory)
    for p in t.configs():
        u, length, seqs = p["gpu-memory-utilization"], p["max-model-len"], p["max-num-seqs"]
        buffers = (1.5 + 0.004 * seqs + 0.5 * length / 32768) * gb
        kv = int((u * 141 * gb - 16 * gb - buffers) / (128 * kib))
        if kv <= 0:
            row = {"ok": False, "signature": "no_kv_cache_memory", "details": {}}
        elif kv < length:
            row = {
                "ok": False,
                "signature": "max_model_len_exceeds_kv",
                "details": {"asked_max_model_len": length, "estimated_max_model_len": kv},
            }
        else:
            batch = min(seqs, kv // 4096, 1024)
            step = (16 * gb + batch * 4096 * 128 * kib) / 4.8e12 + 0.002
            row = {"ok": True, "tok_s": batch / step, "context": length, "kv_tokens": kv}
        rows[t.key(p)] = row
    return t


# ---------------------------------------------------------------- replay through tuner's Driver
class TableExecutor:
    """An executor whose 'launch' is a lookup: the real Driver, sampler, screen and record()."""

    max_parallel = 1

    def __init__(self, table: Table) -> None:
        self.table = table
        self.launches: list[str] = []

    def submit(self, space, params, trial_dir, partition, ledger=None) -> Future:
        key = self.table.key(params)
        self.launches.append(key)
        row = self.table.rows[key]
        future: Future = Future()
        if row["ok"]:
            load = ProbeResult("load", {"output_tok_s": row["tok_s"]})
            cap = Capacity(kv_tokens=row.get("kv_tokens"), context_per_request=int(row["context"]))
            future.set_result(TrialOutcome(dict(params), (), cap, (load,), Timings()))
        else:
            ev = Evidence(argv=(), elapsed_s=0.0, signature=row["signature"], details=row.get("details") or {})
            future.set_exception(StartupFailed("from the table", evidence=ev))
        return future

    def cancel(self, future, *, force) -> None:
        pass

    def shutdown(self) -> None:
        pass


def _space(table: Table):
    from tests.conftest import tiny_space

    raw = tiny_space(name="replay")
    raw["engine"] = table.engine
    raw["model"] = {"path": "builtin:smollm2-135m-instruct" if table.engine == "llamacpp" else "org/model"}
    raw["parameters"] = {k: {"type": "categorical", "choices": v} for k, v in table.grid.items()}
    raw["server"] = {"flags": {}}
    if "cache-type-k" in table.grid:
        raw["tied"] = {"cache-type-v": "cache-type-k"}  # the table was measured with V = K
    raw["probes"] = {"load": {"concurrency": [4]}, "recall": None}
    return validate(raw, "replay.yaml")


def replay_optuna(table: Table, sampler: optuna.samplers.BaseSampler, *, screen: bool, budget: int) -> tuple[list[str], int]:
    space = _space(table)
    executor = TableExecutor(table)
    study = optuna.create_study(directions=OBJECTIVE.directions, sampler=sampler)
    with tempfile.TemporaryDirectory() as tmp:
        Driver(
            space,
            study,
            OBJECTIVE,
            RunDir(Path(tmp)),
            executor,
            trials=budget,
            write_csv=False,
            screen=(Screen(table.memory) if table.memory else screen_for(table.engine)) if screen else None,
        ).run()
    screened = [t for t in read_trials(study) if t.screened]
    false_skips = sum(1 for t in screened if table.rows[table.key(t.params)]["ok"])
    return executor.launches, (false_skips, len(screened))


def grid_order(table: Table) -> list[str]:
    return [table.key(p) for p in table.configs()]


def auto_tune(table: Table) -> list[str]:
    """vLLM auto_tune.sh: for each combination of the other knobs, lower the memory knob until
    the server starts (failed attempts are launches too), then benchmark that config."""
    others = [k for k in table.grid if k != table.memory_knob]
    order = sorted(table.grid[table.memory_knob], reverse=table.descending)
    launches = []
    for combo in itertools.product(*(table.grid[k] for k in others)):
        for value in order:
            key = table.key({**dict(zip(others, combo, strict=True)), table.memory_knob: value})
            launches.append(key)
            if table.rows[key]["ok"]:
                break
    return launches


# ---------------------------------------------------------------- scoring
def _points(table: Table, keys: list[str]) -> list[tuple[float, float]]:
    return [(r["context"], r["tok_s"]) for k in keys if (r := table.rows[k])["ok"]]


def score(table: Table, launches: list[str]) -> dict[str, Any]:
    all_hv = hypervolume_2d(_points(table, list(table.rows)), (0.0, 0.0))
    best_at = max((r["tok_s"] for r in table.rows.values() if r["ok"] and r["context"] >= table.context_floor), default=0.0)
    to_hv = to_best = None
    for n in range(1, len(launches) + 1):
        seen = _points(table, launches[:n])
        if to_hv is None and hypervolume_2d(seen, (0.0, 0.0)) >= 0.95 * all_hv:
            to_hv = n
        if to_best is None and any(c >= table.context_floor and t >= 0.95 * best_at for c, t in seen):
            to_best = n
        if to_hv and to_best:
            break
    until = max(to_hv or len(launches), to_best or len(launches))
    wasted = sum(1 for k in launches[:until] if not table.rows[k]["ok"])
    return {"to_hv": to_hv, "to_best": to_best, "wasted": wasted, "launched": until}


def _median(values: list[int | None], cap: int) -> str:
    """Median, where a run that never reached the target counts as ``cap`` (shown as '> cap'), with
    its spread over seeds (interquartile range) where there is more than one run."""
    counted = [v if v is not None else cap + 1 for v in values]
    shown = _capped(statistics.median(counted), cap)
    if len(counted) < 2:
        return shown
    q1, _, q3 = statistics.quantiles(counted, n=4, method="inclusive")
    return f"{shown} (IQR {_capped(q1, cap)}-{_capped(q3, cap)})"


def _capped(value: float, cap: int) -> str:
    return f"> {cap}" if value > cap else f"{value:g}"


def run(table: Table, seeds: int) -> list[str]:
    size = len(table.rows)
    budget = min(size, BUDGET)  # launches per replayed run; a target not reached by then counts as the budget
    failing = sum(1 for r in table.rows.values() if not r["ok"])
    results: dict[str, list[dict[str, Any]]] = {"ours (TPE + screen)": [], "random": []}
    skips, total_skips = [], []
    for seed in range(seeds):
        ours, (false_skips, skipped) = replay_optuna(
            table, optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=4), screen=True, budget=budget
        )
        results["ours (TPE + screen)"].append(score(table, ours))
        skips.append(false_skips)
        total_skips.append(skipped)
        rand, _ = replay_optuna(table, optuna.samplers.RandomSampler(seed=seed), screen=False, budget=budget)
        results["random"].append(score(table, rand))
    results["grid order"] = [score(table, grid_order(table))]
    results["auto_tune.sh"] = [score(table, auto_tune(table))]
    lines = [
        f"### {table.name}: {size} configs, {failing} fail to start; context >= {table.context_floor:,} for the best-throughput "
        "target",
        "",
        "| strategy | median launches to 95 % of front HV | ... as % of grid | median launches to 95 % of best tok/s at context "
        "floor | median wasted launches (failed starts) |",
        "|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        cap = budget if name in ("ours (TPE + screen)", "random") else size
        hv = _median([r["to_hv"] for r in rows], cap)
        best = _median([r["to_best"] for r in rows], cap)
        launched = statistics.median(r["launched"] for r in rows)
        wasted = statistics.median(r["wasted"] for r in rows)
        share = f"{float(hv.split()[0]) / size:.1%}" if not hv.startswith(">") else "-"
        lines.append(f"| {name} | {hv} | {share} | {best} | {wasted:g} of {launched:g} ({wasted / max(launched, 1):.0%}) |")
    ours_hv = [r["to_hv"] or budget + 1 for r in results["ours (TPE + screen)"]]
    rand_hv = [r["to_hv"] or budget + 1 for r in results["random"]]
    pairs = [(a, b) for a in ours_hv for b in rand_hv]
    superiority = (sum(a < b for a, b in pairs) + 0.5 * sum(a == b for a, b in pairs)) / len(pairs)
    lines += [
        "",
        f"launches to 95 % of front HV, ours vs random over all {seeds} x {seeds} seed pairs: ours fewer in "
        f"{superiority:.0%} (probability of superiority; 50 % is no difference)",
    ]
    lines += [
        "",
        f"pre-screen: median {statistics.median(total_skips):g} launches skipped per run; false skips (skipped configs "
        f"that would have started): median {statistics.median(skips):g}, max {max(skips)}, {sum(skips)} of {sum(total_skips)} "
        f"skips over {seeds} seeds",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser()
    parser.add_argument("--measure", action="store_true", help="re-measure the CPU table on the real llama-server")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--tables", default="cpu,h200,gpu", help="which tables: cpu (measured), h200 (measured), gpu (simulation)"
    )
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings

    warnings.filterwarnings("ignore")
    chosen = args.tables.split(",")
    path = TABLES / "cpu-llamacpp-grid.json"
    if "cpu" in chosen and not args.measure and not path.is_file():
        sys.exit(
            f"error: the measured CPU table {path.relative_to(ROOT)} is not in this clone: build it with --measure "
            "(108 configs on the real llama-server, about 2 minutes each) and commit it, or use --tables gpu"
        )
    if "cpu" in chosen and args.measure:
        measure_cpu_table(path)
    lines = [f"command: python benchmarks/search_efficiency.py --seeds {args.seeds} --tables {args.tables}", ""]
    for table in [make() for name, make in (("cpu", cpu_table), ("h200", h200_table), ("gpu", gpu_table)) if name in chosen]:
        lines += run(table, args.seeds)
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text("# Search efficiency\n\n" + text + "\n")
    return text


if __name__ == "__main__":
    end_servers_on_sigterm()  # `timeout` must not leave a server behind
    main()
