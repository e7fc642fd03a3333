"""Shared fixtures: the real llama-server (provisioned once), test tiers, and leak checks."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tuner.engines import llamacpp_provision as provision
from tuner.engines.llamacpp import BUILTIN_MODEL
from tuner.host.processes import group_members

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


REAL_STUDY_CORE = 0  # the core the real study's stored space pins its servers to (and re-runs of its configs)


def worker_index() -> int:
    """Which pytest-xdist worker runs this test (0 without xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def worker_core() -> int:
    """The core a single-core test server pins to: one per worker, so two workers' servers do not
    share a core (all on core 0, the suite under ``-n 2`` was CPU-bound on it at 0.8 cores)."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[worker_index() % len(cores)]


def worker_port(base: int) -> int:
    """``base`` moved into this worker's own range: two workers never probe the same ports."""
    return base + 5000 * worker_index()


def _has_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None and os.path.exists("/dev/nvidia0")


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest without xdist does not know it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers more than the cores (PYTEST_XDIST_AUTO_NUM_WORKERS overrides; README's
    ``--maxprocesses 4`` caps it). Tests wait on servers, Ray and sleeps: on 2 cores, two workers
    left 12 % of the cores idle beside the quiet tests' phase, and three ran the suite in 512 s
    where four ran it in 460 s (2026-12-03, one run each; docs/test-suite.md)."""
    if (forced := os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")).isdigit():
        return int(forced)
    return len(os.sched_getaffinity(0)) + 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The quiet tests run on one worker, in a row: one each on several workers left all but one of
    # them waiting for the machine lock at the start instead of running the unit tests.
    for item in items:
        if item.get_closest_marker("quiet") is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("quiet"))
    # Under xdist: the longest first, as the last full run timed them (tests/durations.txt), then
    # the other integration tests; the quick ones fill the workers' tails. xdist hands them out one
    # at a time (--dist loadgroup in pyproject.toml: each test its own unit, a group one unit): the
    # default --dist load handed each worker a run of consecutive tests, which in this order gave one
    # worker every long test (1,007 s instead of 786).
    from tests.durations import load

    seconds = load(Path(__file__).with_name("durations.txt"))

    def group(item: pytest.Item) -> str | None:
        mark = item.get_closest_marker("xdist_group")
        return str(mark.args[0]) if mark else None

    # a group goes to one worker as one unit: it starts where its total puts it, its tests in a row
    def took(item: pytest.Item) -> float:
        return seconds.get(item.nodeid.split("@")[0], 0.0)  # --dist loadgroup suffixes grouped ids

    total: dict[str, float] = {}
    for item in items:
        if (name := group(item)) is not None:
            total[name] = total.get(name, 0.0) + took(item)

    def longest_first(item: pytest.Item) -> tuple[bool, bool, bool, tuple[bool, float], str]:
        name = group(item)
        own = total[name] if name is not None else took(item)
        # the quiet tests first: those the unit tests may run beside, then the settled ones (once
        # the unit tests are done), each shortest first; the unit tests next: they run on the other
        # workers while the quiet ones hold the machine (see pytest_runtest_protocol), then the
        # one_core tests, which run beside the single-core quiet ones, then the other integration
        # tests; longest first
        quiet = item.get_closest_marker("quiet")
        beside = "one_core" in item.keywords
        when = (bool(quiet.kwargs.get("settled")), took(item)) if quiet else (False, -own)
        return (quiet is None, "integration" in item.keywords, not beside, when, name or "")

    items.sort(key=longest_first)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="gpu: needs a real GPU engine; run on the device machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Under xdist, a test marked ``quiet`` (it measures run-to-run noise, or serves with threads
    that wait for each other) runs with no other integration test beside it: it holds this run's
    machine lock exclusively, the others hold it shared, and none starts while a quiet one waits
    or the next quiet one follows on its worker (they run in a row on one, see
    pytest_collection_modifyitems). Held around the whole protocol, so the fixtures a test sets
    up first (the real study's tune, a Ray cluster) wait too. Beside two other
    workers' tests, "quiet" fresh-server runs spread 20-27 % (two CI runs): no run can then be
    told the odd one out.

    A ``quiet(one_core=True)`` test runs pinned to its worker's core (worker_core()), with its
    servers and load client; beside it, one ``one_core`` test at a time runs pinned to the other
    cores (its worker's affinity, which its server and threads inherit), so that neither takes
    the other's core. Those single-thread quiet tests left one of two cores idle for ~80 s
    (docs/test-suite.md). ``quiet(core=N)`` is the same on core N: for a test whose servers a
    stored space pins there, whichever worker runs it.

    ``quiet(settled=True)`` orders it after the other quiet tests, once the unit tests (which take
    no lock and run beside the first quiet tests, unpinned) are done: for a test that compares
    runs with each other, which the unit tests' end would otherwise split into two machines."""
    quiet = item.get_closest_marker("quiet")
    run = getattr(item.config, "workerinput", {}).get("testrunuid")
    if run is None or not (quiet or "integration" in item.keywords):
        yield
        return
    import fcntl
    import time

    from tuner.serving.trial import pinned  # the load client's own pinning: set, then restored

    shared = run_folder(item.config._tmp_path_factory)  # type: ignore[attr-defined]
    wanted = shared / "quiet-wanted"
    with open(shared / "machine.lock", "a") as lock, open(shared / "spare.lock", "a") as spare:
        if quiet:
            own = _own_core(quiet)
            # what it leaves: the cores other than its own for one one_core test, or none
            wanted.write_text("" if own is None else str(own))
            fcntl.flock(lock, fcntl.LOCK_EX)  # once the tests already running have ended
            if own is None:
                fcntl.flock(spare, fcntl.LOCK_EX)  # the one_core test beside the last quiet one too
            try:
                # on its core, with the servers it starts and its load client (they inherit this
                # worker's affinity): unpinned, the SLO tests' servers and clients could float onto
                # the core of the one_core test beside them
                with pinned(() if own is None else (own,)):
                    yield
            finally:
                # the next quiet test on this worker keeps it wanted: no other test starts in between
                if nextitem is None or nextitem.get_closest_marker("quiet") is None:
                    wanted.unlink(missing_ok=True)
                fcntl.flock(spare, fcntl.LOCK_UN)
                fcntl.flock(lock, fcntl.LOCK_UN)
            return
        beside = item.get_closest_marker("one_core") is not None
        # Wait while a quiet test wants the machine; a one_core test goes beside the first one that
        # leaves it a core, also one that starts while it waits (a whole-machine quiet test ahead
        # of the noise test kept it waiting through both, 36-150 s in ci34, the spare core idle).
        while _age(wanted) < 900:  # one left by a worker that died is not waited for
            if beside and _spare_cores(wanted):
                fcntl.flock(spare, fcntl.LOCK_EX)
                if cores := _spare_cores(wanted):  # still: a quiet test that takes the machine may have come
                    try:
                        with pinned(tuple(sorted(cores))):
                            yield
                    finally:
                        fcntl.flock(spare, fcntl.LOCK_UN)
                    return
                fcntl.flock(spare, fcntl.LOCK_UN)
            time.sleep(0.2)
        fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _own_core(quiet: pytest.Mark) -> int | None:
    """The one core a quiet test runs on (``core=N``, or its worker's with ``one_core=True``), or
    None when it holds the whole machine (also for a core N this run may not use)."""
    core = quiet.kwargs.get("core")
    if core is not None:
        return int(core) if core in os.sched_getaffinity(0) else None
    return worker_core() if quiet.kwargs.get("one_core") else None


def _spare_cores(wanted: Path) -> set[int]:
    """The cores a quiet test that wants the machine leaves to one ``one_core`` test beside it:
    all but the one it names in ``wanted``; none when it names none or no quiet test wants it."""
    try:
        named = wanted.read_text().strip()
    except FileNotFoundError:
        return set()
    if _age(wanted) >= 900 or not named.isdigit():
        return set()
    return set(os.sched_getaffinity(0)) - {int(named)}


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This test run's folder, the same for every xdist worker (pytest keeps the last three)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _age(path: Path) -> float:
    """Seconds since ``path`` was last written; infinite when it does not exist."""
    import time

    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return float("inf")


@pytest.fixture(scope="session")
def llama_server() -> Path:
    """The real llama-server binary (built from PyPI sources on first use, then cached)."""
    return provision.server_binary()


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return provision.model_file()


@pytest.fixture()
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    runs = tmp_path / "runs"
    monkeypatch.setenv("TUNER_RUNS", str(runs))
    return runs


def llama_server_process(
    log_dir: Path, model: Path, params: dict, *, cap: str | None = "1GiB", port: int | None = None, timeout: float = 30
):
    """A real llama-server for ``params`` (not started): the tiny space's fixed flags, 1 thread."""
    from tuner import engines
    from tuner.app.prepare import validate
    from tuner.host.partitions import free_port
    from tuner.serving.server import ServerProcess

    raw = tiny_space()
    raw["server"]["memory_cap"] = cap
    space = validate(raw, "t.yaml")
    adapter = engines.get("llamacpp")
    port = port or free_port("127.0.0.1", worker_port(32000), 900)
    cmd = adapter.command(params, space=space, model_path=str(model), port=port)
    return ServerProcess(
        cmd,
        adapter=adapter,
        log_path=Path(log_dir) / "server.log",
        host="127.0.0.1",
        port=port,
        model=str(model),
        startup_timeout=timeout,
        memory_cap=space.server.memory_cap,
    )


def handle(server):  # a ServerProcess in, a ServerHandle out
    """What a probe needs to reach a ready llama-server, with capacity from its log."""
    from tuner import engines
    from tuner.probes import ServerHandle

    cap = engines.get("llamacpp").capacity(server.log_text(), None, None)
    adapter = engines.get("llamacpp")
    return ServerHandle(
        server.url, server.model, cap, cached_tokens_field=adapter.cached_tokens_field, in_flight_source=adapter.in_flight_source
    )


def assert_group_gone(pgid: int) -> None:
    assert group_members(pgid) == [], f"processes of group {pgid} are still alive"


def tune_here(*args: str) -> int:
    """``tune ARGS`` in this process (the CLI's own entry point, its output to pytest's capture):
    its exit code. The SIGTERM handler the CLI installs and ``sys.argv`` are put back after."""
    import signal
    import sys

    from tuner.cli import main

    handler = signal.getsignal(signal.SIGTERM)
    argv, sys.argv = sys.argv, ["tune", *args]
    try:
        main()
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
        signal.signal(signal.SIGTERM, handler)


def tiny_space(**overrides: object) -> dict:
    """A small real llama.cpp space for integration tests (fast probes, 1 core)."""
    space = {
        "name": "tiny",
        "engine": "llamacpp",
        "model": {"path": BUILTIN_MODEL},
        "server": {
            "flags": {"flash-attn": "on", "fit": "off", "cache-ram": 0, "no-warmup": True, "threads": 1},
            "startup_timeout": "30s",
            "memory_cap": "1GiB",
        },
        "parameters": {"ctx-size": {"type": "categorical", "choices": [2048]}},
        "probes": {
            "load": {"concurrency": [2], "prompt_tokens": 32, "output_tokens": 8, "duration": 1, "max_duration": 2, "warmup": 1},
            "recall": None,
        },
        "objectives": "throughput",
        "budget": {"trials": 1},
        "hardware": {"kind": "cpu", "devices": [worker_core()], "per_trial": 1},
    }
    for key, value in overrides.items():
        space[key] = value
    return space


@pytest.fixture(scope="session")
def real_study(tmp_path_factory: pytest.TempPathFactory, llama_server: Path, smollm2: Path):
    """A small real tune of the embedded default's engine, made once per test run (the first
    xdist worker to ask builds it under a lock, every worker gets its own copy to write to): two
    configs that serve (different throughput and recall-verified context) and one whose KV
    cache does not fit under the memory cap. Returns (study, run_dir, space)."""
    from tuner import objectives
    from tuner.app.prepare import validate
    from tuner.base.artifacts import RunDir
    from tuner.launching.executors import InlineExecutor
    from tuner.orchestration.driver import Driver
    from tuner.trials.study import open_study

    raw = tiny_space(name="real")
    raw["hardware"]["devices"] = [REAL_STUDY_CORE]  # one build for every worker: the space it stores is the same for all
    raw["parameters"] = {
        "ctx-size": {"type": "categorical", "choices": [512, 2048, 65536]},
        "parallel": {"type": "int", "low": 1, "high": 2},
    }
    # Rungs up to 512 tokens: prefill on one core runs at ~170 tokens/s (alone; less beside other
    # tests), so each rung of 1,024 cost 6-8 s in every run of these configs the tests repeat (the
    # build, revalidation, compare: ten or so), and these tests check plumbing. Two slots of 256 verify
    # 256 tokens, one of 2,048 verifies the ladder's end: different contexts, as a front needs.
    raw["probes"]["recall"] = {"lengths": [128, 256, 512], "depths": [0.5]}
    raw["objectives"] = "throughput-vs-context"
    raw["enqueue"] = [
        {"ctx-size": 512, "parallel": 2},
        {"ctx-size": 2048, "parallel": 1},
        {"ctx-size": 65536, "parallel": 2},
    ]
    space = validate(raw, "real.yaml")
    objective = objectives.load(space.objectives)

    def build(folder: Path) -> None:
        golden = RunDir(folder / "real")
        golden.root.mkdir()
        study = open_study(space, objective, name="real", storage=golden.db_url, source="real.yaml")
        Driver(space, study, objective, golden, InlineExecutor(), trials=3).run()

    built = built_once(tmp_path_factory, "real-study", build)
    return (*copy_study(built / "real", tmp_path_factory.mktemp("real-study") / "real"), space)


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder ``build`` fills once per test run, whichever xdist worker asks first (under a lock;
    the others wait and reuse it). Read it, never write to it: copy what a test changes."""
    import fcntl

    shared = run_folder(tmp_path_factory)
    folder = shared / f"{name}-built"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / "done").touch()
    return folder


def copy_study(source: Path, dest: Path):  # (optuna.Study, RunDir)
    """A run folder copied to ``dest`` (study.db, trials, artifacts) and its study opened there: a
    copy to write to while others read the original."""
    import optuna

    from tuner.base.artifacts import RunDir

    shutil.copytree(source, dest)
    run_dir = RunDir(dest)
    return optuna.load_study(study_name=dest.name, storage=run_dir.db_url), run_dir


@pytest.fixture(scope="session")
def postgres() -> str:
    """A real PostgreSQL server for the session (initdb/pg_ctl from the distribution's packages,
    in a temp dir, on a free port of 127.0.0.1; as the postgres user when run as root, which
    initdb refuses). Yields an Optuna storage URL."""
    import glob
    import os
    import shutil
    import subprocess
    import tempfile

    from tuner.host.partitions import free_port

    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))), None)
    if found is None:
        pytest.skip("needs PostgreSQL's initdb and pg_ctl (.ci/run installs Debian's postgresql)")
    bin_dir = Path(found).resolve().parent
    root = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, log, base = root / "data", root / "server.log", worker_port(35500)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*as_user, *argv], check=True, capture_output=True, text=True)

    run(str(bin_dir / "initdb"), "-D", str(data), "-U", "tuner", "--auth=trust", "-E", "UTF8")
    start = (str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w")
    for _ in range(5):  # a port free when probed can be taken before the server binds it (an outgoing
        # connection's ephemeral port, 32768-60999 on Linux): the next free one, on that error only
        port = free_port("127.0.0.1", base, 400)
        try:
            run(*start, "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start")
            break
        except subprocess.CalledProcessError:
            if "Address already in use" not in log.read_text(errors="replace"):
                raise
            base = port + 1
    else:
        raise RuntimeError(f"PostgreSQL found no port to bind from {worker_port(35500)} in 5 tries: {log}")
    try:
        run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "tuner", "tuner")
        yield f"postgresql+psycopg://tuner@127.0.0.1:{port}/tuner"
    finally:
        subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
