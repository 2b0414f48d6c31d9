"""``delayq-server`` started from a source tree, for the benchmarks that measure a served
endpoint (``idle_sockets.py``, ``header_flood.py``, ``quota_burst.py``).

The tree is put first on ``PYTHONPATH``, so that two commits compare on one machine in
one run; the server listens on a free loopback port, and its config file, SQLite file
and log live in a work directory of the caller's.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def sqlite_section(workdir: Path) -> str:
    """The config lines that keep the SQLite store in *workdir*."""
    return f"[drivers:message_store:sqlite]\npath = {workdir / 'delayq.sqlite'}\n"


def start_server(tree: Path, workdir: Path, config: str, port: int) -> subprocess.Popen:
    """``delayq-server`` from *tree* with *config* (an ini text), on *port*, answering
    ``/v2/ping`` before this returns; its log is ``workdir/server.log``."""
    path = workdir / "delayq.conf"
    path.write_text(config)
    script = shutil.which("delayq-server", path=str(Path(sys.executable).parent))
    command = [script] if script else [sys.executable, "-m", "delayq.server"]
    env = {**os.environ, "PYTHONPATH": str(tree), "XDG_RUNTIME_DIR": str(workdir)}
    with open(workdir / "server.log", "wb") as log:
        proc = subprocess.Popen([*command, "--config-file", str(path), "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=2)
            conn.request("GET", "/v2/ping")
            if conn.getresponse().status == 204:
                conn.close()
                return proc
        except OSError:
            time.sleep(0.1)
    stop_server(proc)
    raise RuntimeError(f"delayq-server from {tree} did not start; see {workdir}/server.log")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM, and SIGKILL to its whole session after 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
