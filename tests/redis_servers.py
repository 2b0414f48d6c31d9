"""Real ``redis-server`` processes for the tests: one single node and one 3-master cluster.

Each starts on first use, on free loopback ports, with its files in a temporary
directory, and stops when the test session ends (``stop_all``, called from conftest).
Nothing here touches a Redis the machine may already run.
"""

from __future__ import annotations

import atexit
import random
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.server import port_is_free

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
START_TIMEOUT = 30.0


@dataclass
class RedisServer:
    """One redis-server process."""

    port: int
    directory: Path
    extra: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None

    def start(self) -> None:
        if not Path(REDIS_SERVER).exists():
            raise RuntimeError("redis-server is not installed; run the README test command "
                               "(scripts/test.sh), which installs the redis-server package.")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(self.port),
             "--dir", str(self.directory), "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--logfile", str(self.directory / "redis.log"),
             *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        client = redis.Redis(port=self.port)
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (self.directory / "redis.log").read_text(errors="replace")
                    raise RuntimeError(f"redis-server on {self.port} did not start:\n{log}"
                                       ) from None
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @property
    def uri(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def free_ports(count: int, *, with_bus: bool = False) -> list[int]:
    """*count* consecutive free ports (and their cluster bus ports, port + 10000)."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(20000, 30000)
        ports = list(range(first, first + count))
        wanted = ports + ([p + 10000 for p in ports] if with_bus else [])
        if all(port_is_free(p) for p in wanted):
            return ports
    raise RuntimeError("no free ports for redis-server")


def cluster_ok(client: redis.Redis) -> bool:
    info = client.execute_command("CLUSTER INFO")
    if isinstance(info, dict):  # redis-py parses the reply
        return info.get("cluster_state") == "ok"
    return b"cluster_state:ok" in info


class Servers:
    """The session's Redis servers, started lazily."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._single: RedisServer | None = None
        self._cluster: list[RedisServer] = []
        self._others: list[RedisServer] = []

    def _dir(self, name: str) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="delayq-redis-"))
        return self._root / name

    def single(self) -> RedisServer:
        if self._single is None:
            [port] = free_ports(1)
            server = RedisServer(port, self._dir(f"single-{port}"))
            server.start()
            self._single = server
        return self._single

    def fresh(self, *extra: str) -> RedisServer:
        """A server of its own, for a test that measures or restarts it."""
        [port] = free_ports(1)
        server = RedisServer(port, self._dir(f"fresh-{port}"), list(extra))
        server.start()
        self._others.append(server)
        return server

    def cluster_uri(self) -> str:
        """A 3-master cluster, every slot assigned and the state ok; its seed URI."""
        if not self._cluster:
            ports = free_ports(3, with_bus=True)
            for port in ports:
                server = RedisServer(port, self._dir(f"cluster-{port}"), [
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", "5000"])
                server.start()
                self._cluster.append(server)
            subprocess.run(
                [REDIS_CLI, "--cluster", "create",
                 *(f"127.0.0.1:{p}" for p in ports), "--cluster-replicas", "0",
                 "--cluster-yes"], check=True, capture_output=True, timeout=60)
            deadline = time.monotonic() + START_TIMEOUT
            for port in ports:
                client = redis.Redis(port=port)
                while not cluster_ok(client):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the Redis cluster did not reach state ok")
                    time.sleep(0.1)
                client.close()
        return "redis://" + ",".join(f"127.0.0.1:{s.port}" for s in self._cluster) + "/0"

    def stop_all(self) -> None:
        for server in [self._single, *self._cluster, *self._others]:
            if server is not None:
                server.stop()
        self._single, self._cluster, self._others = None, [], []
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


SERVERS = Servers()
atexit.register(SERVERS.stop_all)
