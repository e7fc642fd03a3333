"""Fault injector and benchmark endpoint: a minimal OpenAI-style streaming server.

Modes (``--mode``):
  ok         stream ``max_tokens`` one-token events, then usage and [DONE] (pre-built bytes: cheap,
             so a client measured against it is the bottleneck, not this server)
  midstream  send half the tokens, then an error event and close: a 500 in the middle of a stream
  reject     answer 429 at once when more than ``--capacity`` requests are in flight
Also answers /tokenize (one token per word), /health and /arrivals (when each completion request
arrived, its body read, in this machine's monotonic clock: what the server counted). ``--each``:
every event in a write of its own (as an engine streams: one read per token on the client), not
all of them in one. ``--service R``: a slow queue: requests are served one after another, first
in first out, R a second (each answer starts when its turn comes). ``--gap S``: with ``--each``,
S seconds between a stream's tokens, as an engine decodes (a client that stamps a token late shows
its own lag in the ITL it measures: ITL - S). Never the engine a feature is proven on.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def make_handler(
    mode: str, capacity: int, hold: float, each: bool = False, service: float | None = None, gap: float = 0.0
) -> type[BaseHTTPRequestHandler]:
    in_flight = [0]
    lock = threading.Lock()
    arrivals: list[float] = []
    free_at = [0.0]  # --service: when the queue's server is next free
    token = _event({"choices": [{"index": 0, "text": "x"}]})

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # headers and body go out in separate writes: with Nagle on, each answer waited for the
        # client's delayed ACK (40 ms), and the probe's ~300 /tokenize calls took 13 s
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def _json(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/arrivals":
                with lock:
                    self._json(200, {"arrivals": list(arrivals)})
                return
            self._json(200, {"status": "ok"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/tokenize":
                text = body.get("content") or body.get("prompt") or ""
                self._json(200, {"tokens": list(range(len(text.split())))})
                return
            with lock:
                arrivals.append(time.perf_counter())
                in_flight[0] += 1
                over = mode == "reject" and in_flight[0] > capacity
                served = max(arrivals[-1], free_at[0]) + 1 / service if service else 0.0  # its turn, then its service
                free_at[0] = served
            try:
                if over:
                    self._json(429, {"error": {"message": "server busy", "type": "too_many_requests"}})
                    return
                if service and (wait := served - time.perf_counter()) > 0:
                    time.sleep(wait)  # its turn in the queue, served at --service a second
                self._stream(int(body.get("max_tokens", 16)), len(str(body.get("prompt", "")).split()))
            finally:
                with lock:
                    in_flight[0] -= 1

        def _stream(self, n: int, prompt_tokens: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            if hold:
                threading.Event().wait(hold)
            if mode == "midstream":
                self.wfile.write(token * (n // 2) + _event({"error": {"message": "internal error", "code": 500}}))
                self.wfile.flush()
                self.close_connection = True
                return
            usage = _event({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": n}})
            if each:
                due = time.perf_counter()
                for _ in range(n):
                    if gap and (wait := (due := due + gap) - time.perf_counter()) > 0:
                        time.sleep(wait)  # the next token is due: a fixed cadence, not a drifting sum of sleeps
                    self.wfile.write(token)
                    self.wfile.flush()
                self.wfile.write(usage + b"data: [DONE]\n\n")
            else:
                self.wfile.write(token * n + usage + b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the listen backlog: an open loop's burst of connects is not refused (the default is 5)

    def handle_error(self, request, client_address) -> None:
        # a client that hung up mid-answer (the probe ending a level, or on the mid-stream error) is
        # what a server sees every day: not a traceback on the test run's output (ci47 printed two)
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def serve(
    port: int,
    mode: str = "ok",
    capacity: int = 2,
    hold: float = 0.0,
    each: bool = False,
    service: float | None = None,
    gap: float = 0.0,
) -> ThreadingHTTPServer:
    server = _Server(("127.0.0.1", port), make_handler(mode, capacity, hold, each, service, gap))
    server.daemon_threads = True
    return server


@contextmanager
def running(*flags: str, core: int | None = None, first_port: int = 33000) -> Iterator[tuple[str, int]]:
    """This server in a process and session of its own (on ``core`` when given, ``flags`` as on
    its command line), once /health answers: (its URL, its pid); its group is ended afterwards."""
    from tuner.host.partitions import free_port

    port = free_port("127.0.0.1", first_port, 200)
    pin = ["taskset", "--cpu-list", str(core)] if core is not None else []
    proc = subprocess.Popen([*pin, sys.executable, __file__, "--port", str(port), *flags], start_new_session=True)
    try:
        for _ in range(100):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/health")
                conn.getresponse().read()
                conn.close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        os.killpg(proc.pid, 15)
        proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["ok", "midstream", "reject"], default="ok")
    parser.add_argument("--capacity", type=int, default=2)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--each", action="store_true")
    parser.add_argument("--service", type=float, default=None)
    parser.add_argument("--gap", type=float, default=0.0)
    args = parser.parse_args()
    serve(args.port, args.mode, args.capacity, args.hold, args.each, args.service, args.gap).serve_forever()
