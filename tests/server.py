"""Run the real ``delayq-server`` console script as a subprocess, for end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

SERVER_SCRIPT = Path(sys.executable).parent / "delayq-server"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


# Ports test servers listen on: below Linux's ephemeral range (32768-60999), from which
# the kernel picks every client connection's local port. A port from that range may be
# taken by one of the thousands of client connections a test opens (the idle-socket
# attack) between the moment it is found free and the moment a server binds it; Swift's
# servers then retry binding for 30 s and the test times out. The Redis servers take
# 20000-29999 (tests/redis_servers.py).
SERVER_PORTS = range(10000, 20000)


def free_port() -> int:
    """A TCP port on 127.0.0.1, outside the ephemeral range, that is free right now."""
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.choice(SERVER_PORTS)
        if port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {SERVER_PORTS}")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def write_config(path: Path, sections: Mapping[str, Mapping[str, object]]) -> Path:
    """Write an oslo.config (ini) file: ``{"group": {"option": value}}``."""
    lines = []
    for group, options in sections.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in options.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def child_pids(pid: int) -> list[int]:
    """Pids of the processes whose parent is *pid* (read from /proc/*/stat)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # the process ended while we were looking
        # The command name (field 2) is in parentheses and may contain spaces.
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[1]) == pid:  # fields[0] is the state, fields[1] the ppid
            children.append(int(stat.parent.name))
    return sorted(children)


@dataclass
class RunningServer:
    proc: subprocess.Popen
    host: str
    port: int
    cwd: Path
    stderr_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, then SIGKILL after *timeout*; the exit code (None if killed)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Kill the whole process group: the master and any worker it left behind.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            return None


def wait_until_serving(server: RunningServer, timeout: float = START_TIMEOUT,
                       statuses: Collection[int] = (204,)) -> None:
    """Poll GET /v2/ping until it answers one of *statuses* (204: serving, storage up);
    fail with the server's stderr if it dies or hangs.

    ``statuses=(503,)`` waits for a server that serves HTTP while its storage is down.
    """
    deadline = time.monotonic() + timeout
    last_error: object = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"delayq-server exited with {server.proc.returncode} before "
                               f"serving; stderr:\n{server.stderr()}")
        try:
            response = httpx.get(f"{server.url}/v2/ping", timeout=15)
            if response.status_code in statuses:
                return
            last_error = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            last_error = exc
        time.sleep(0.1)
    wanted = " or ".join(map(str, statuses))
    raise RuntimeError(f"delayq-server did not answer /v2/ping with {wanted} within {timeout} s "
                       f"(last: {last_error!r}); stderr:\n{server.stderr()}")


@contextlib.contextmanager
def delayq_server(cwd: Path, *, config: Mapping[str, Mapping[str, object]] | None = None,
                  args: list[str] | None = None, port: int | None = None,
                  host: str = "127.0.0.1", wait: bool = True,
                  env: Mapping[str, str] | None = None) -> Iterator[RunningServer]:
    """Start ``delayq-server`` in *cwd* and stop it (SIGTERM, then SIGKILL) on exit.

    *config* is written to ``cwd/delayq.conf`` and passed with ``--config-file``; it gets
    a SQLite path in *cwd* unless it names one. Unless *port* or ``--port`` in *args* is
    given, ``--port`` is a free port. *port* is only where the helper looks for the server.
    *env* adds to (or replaces) the server's environment variables.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    argv = [str(SERVER_SCRIPT)]
    if config is not None:
        sections = {group: dict(options) for group, options in config.items()}
        sections.setdefault("drivers:message_store:sqlite", {}).setdefault(
            "path", str(cwd / "delayq.sqlite"))
        argv += ["--config-file", str(write_config(cwd / "delayq.conf", sections))]
    args = list(args or [])
    if port is None:
        if "--port" in args:
            port = int(args[args.index("--port") + 1])
        else:
            port = free_port()
            args += ["--port", str(port)]
    argv += args
    stderr_path = cwd / "server.stderr"
    # gunicorn puts its control socket in $XDG_RUNTIME_DIR (else ~/.gunicorn): keep each
    # test server's socket in its own directory rather than sharing one in $HOME.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_RUNTIME_DIR": str(cwd), **(env or {})}
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=stderr, stderr=stderr, env=env,
                                start_new_session=True)
    server = RunningServer(proc, host, port, cwd, stderr_path)
    try:
        if wait:
            wait_until_serving(server)
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def api_client(server: RunningServer, project: str) -> Iterator[httpx.Client]:
    """An HTTP client of *server*'s ``/v2`` API in *project*, with a Client-ID of its
    own."""
    with httpx.Client(base_url=f"{server.url}/v2", timeout=30, headers={
            "Client-ID": str(uuid.uuid4()), "X-Project-ID": project}) as client:
        yield client
