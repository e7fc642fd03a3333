"""ServerProcess against the real llama-server: serve, fail for real, time out, leave nothing."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import assert_group_gone, llama_server_process, worker_port
from tuner import engines
from tuner.base.exceptions import StartupFailed, StartupTimeout
from tuner.engines import Command
from tuner.host.partitions import free_port
from tuner.serving.server import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.one_core]  # each a 1-thread server on worker_core()
adapter = engines.get("llamacpp")
FAULT = Path(__file__).resolve().parent / "fault" / "hang_server.py"


def _server(tmp_path: Path, model: Path, params: dict, **kwargs) -> ServerProcess:
    return llama_server_process(tmp_path, model, params, **kwargs)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_good_config_serves_and_leaves_nothing(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    server = _server(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2})
    with server:
        took = server.wait_ready()
        pgid = server.pid
        reply = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=30)
        assert reply.status_code == 200
        assert took < 30
    assert_group_gone(pgid)
    assert _port_free(server.port)
    log = (tmp_path / "server.log").read_text()
    assert "n_slots = 2" in log


def test_a_memory_capped_server_lives_through_more_connections_than_its_thread_pool(
    tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """llama-server serves each connection past its pool of 6 on a thread of its own. Under the
    space's 1 GiB cap (RLIMIT_AS) each new thread's malloc arena reserved 64 MiB of it, and 24
    requests at once killed the server ("Resource temporarily unavailable") with 0.5 GiB in use;
    with the cap's MALLOC_ARENA_MAX every one of them is answered."""
    server = _server(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 2})

    async def burst() -> list[httpx.Response | BaseException]:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(timeout=120, trust_env=False, limits=limits) as client:
            url = f"{server.url}/v1/completions"
            asks = (client.post(url, json={"prompt": f"Count to {i}", "max_tokens": 8}) for i in range(24))
            return await asyncio.gather(*asks, return_exceptions=True)

    with server:
        server.wait_ready()
        assert server.command.env.get("MALLOC_ARENA_MAX") == "2"
        replies = asyncio.run(burst())
        died = server.died()
    log = (tmp_path / "server.log").read_text()
    assert not died, log[-400:]
    assert [getattr(r, "status_code", r) for r in replies] == [200] * 24


def test_kv_cache_that_does_not_fit_fails_fast_with_evidence(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    server = _server(tmp_path, smollm2, {"ctx-size": 65536, "parallel": 2, "cache-type-k": "f16"})
    with server, pytest.raises(StartupFailed) as info:
        server.wait_ready()
    ev = info.value.evidence
    assert ev.signature == "kv_cache_oom"
    assert ev.returncode == 1
    assert ev.elapsed_s < 10
    assert any("failed to allocate buffer for kv cache" in line.text for line in ev.lines)
    assert ev.log_path == str(tmp_path / "server.log")
    assert "--ctx-size" in ev.argv
    assert_group_gone(server.pid)


def test_bad_flag_value_is_classified(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    server = _server(tmp_path, smollm2, {"cache-type-k": "q9_9"})
    with server, pytest.raises(StartupFailed) as info:
        server.wait_ready()
    assert info.value.evidence.signature == "bad_flag"
    assert any("Unsupported cache type" in line.text for line in info.value.evidence.lines)


def test_port_held_by_another_server_is_not_mistaken_for_ours(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    first = _server(tmp_path / "a", smollm2, {"ctx-size": 2048})
    with first:
        first.wait_ready()
        second = _server(tmp_path / "b", smollm2, {"ctx-size": 2048}, port=first.port)
        with second, pytest.raises(StartupFailed) as info:
            second.wait_ready()
        assert info.value.evidence.signature == "port_in_use"
        # the first server is untouched by the second's teardown
        assert httpx.get(f"{first.url}/health", timeout=5).status_code == 200


def test_ready_checks_the_model_identity(tmp_path: Path, llama_server: Path, smollm2: Path) -> None:
    other = tmp_path / "other.gguf"
    os.link(smollm2, other) if os.stat(smollm2).st_dev == os.stat(tmp_path).st_dev else other.write_bytes(smollm2.read_bytes())
    server = _server(tmp_path, other, {"ctx-size": 2048})
    with server:
        server.wait_ready()
        with httpx.Client(timeout=10) as client:
            assert adapter.ready(client, server.url, model=str(other)) is True
            assert adapter.ready(client, server.url, model=str(smollm2)) is False


def test_hung_server_is_killed_at_its_timeout(tmp_path: Path) -> None:
    port = free_port("127.0.0.1", worker_port(32300), 100)
    cmd = Command((sys.executable, str(FAULT), "--port", str(port)))
    server = ServerProcess(
        cmd,
        adapter=adapter,
        log_path=tmp_path / "hang.log",
        host="127.0.0.1",
        port=port,
        model="x",
        startup_timeout=2.0,
        term_timeout=1.0,
    )
    began = time.monotonic()
    with server, pytest.raises(StartupTimeout) as info:
        server.wait_ready()
    assert 2.0 <= time.monotonic() - began < 10  # 2 s timeout + TERM, TERM, KILL
    assert info.value.evidence.signature == "startup_timeout"
    assert info.value.evidence.returncode is None  # still running when we gave up
    assert_group_gone(server.pid)  # parent ignored TERM, and its child: both gone
    assert "ignoring SIGTERM" in (tmp_path / "hang.log").read_text()
    assert _port_free(port)


def test_a_signal_that_interrupts_a_teardown_still_ends_the_group() -> None:
    """SIGTERM's SystemExit (a benchmark's `timeout`) arrived while a slow SGLang shut down, and the
    server outlived the script. A group that ignores TERM stands for the slow engine (no real one
    shuts down slowly on demand); an interruption mid-teardown KILLs it before it goes on."""
    import signal
    import subprocess

    from tuner.host.processes import terminate_group

    slow = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", slow], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"

    def interrupt(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(SystemExit):
            terminate_group(proc.pid, term_timeout=30.0, proc=proc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert proc.wait(5) == -signal.SIGKILL
    assert_group_gone(proc.pid)


def test_a_signal_between_the_spawn_and_the_with_block_still_ends_the_server(
    tmp_path: Path, llama_server: Path, smollm2: Path
) -> None:
    """A SIGTERM that lands while ``start`` still runs (the spawn done, the with block not yet
    entered, so no ``__exit__``) left llama-server running after its benchmark exited 143."""
    import signal

    server = _server(tmp_path, smollm2, {"ctx-size": 2048, "parallel": 1})
    spawn = server.start

    def start_then_interrupted() -> None:
        spawn()
        raise SystemExit(128 + signal.SIGTERM)  # where the handler raised: after the spawn, inside __enter__

    server.start = start_then_interrupted  # type: ignore[method-assign]
    with pytest.raises(SystemExit), server:
        pytest.fail("the with block must not be entered")
    assert server.proc is not None and server.proc.poll() is not None
    assert_group_gone(server.proc.pid)


def test_a_port_bound_after_the_teardown_by_another_process_is_not_a_leftover() -> None:
    """Two servers on one host can take turns on a port: another test's (or study's) server
    picked the port this one had just freed, and the teardown called it "still bound" (a .ci/run
    beside a busy loop). A listener in the server's group, or started before its teardown began,
    is a leftover; one started later outside it is not."""
    import subprocess

    from tuner.host import procfs
    from tuner.serving.server import leftover_listeners

    listen = (
        "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
        "print('up', flush=True); time.sleep(60)"
    )

    def holder(port: int) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", listen, str(port)], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        return proc

    early_port = free_port("127.0.0.1", worker_port(35400), 50)
    late_port = free_port("127.0.0.1", early_port + 1, 50)
    early = holder(early_port)
    try:
        time.sleep(0.05)
        since = procfs.uptime_ticks()
        time.sleep(0.05)
        late = holder(late_port)
        try:
            assert since is not None
            assert leftover_listeners(early_port, pgid=999_999, since_ticks=since) == {early.pid}  # older than the teardown
            assert leftover_listeners(late_port, pgid=999_999, since_ticks=since) == set()  # another's, started later
            assert leftover_listeners(late_port, pgid=late.pid, since_ticks=since) == {late.pid}  # in the group
        finally:
            late.kill()
            late.wait()
    finally:
        early.kill()
        early.wait()
