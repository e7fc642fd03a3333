"""Fault injector (tests only): a 'server' that never becomes ready and resists a polite stop.

It accepts TCP connections on --port but never answers, starts a child in its process group,
and ignores the first SIGTERM, so the tuner must escalate to a group SIGKILL. A real engine
cannot be made to hang on demand; this stands in for that one case only."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--host", default="127.0.0.1")
args, _ = parser.parse_known_args()

signal.signal(signal.SIGTERM, lambda *a: print("ignoring SIGTERM", flush=True))
child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind((args.host, args.port))
sock.listen(16)
print(f"hang server listening on {args.port}, child {child.pid}", flush=True)
held = []
while True:
    conn, _ = sock.accept()
    held.append(conn)  # never answer
    time.sleep(0.01)
