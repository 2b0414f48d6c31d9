"""Claim latency under backlog: does a large backlog slow down the claim of a ready message?

Starts the real ``delayq-server`` (gunicorn + uvicorn workers) on a temporary
configuration and measures, through the HTTP API only, on two queues of one project:

* ``bench-empty``: no backlog;
* ``bench-backlog``: ``--backlog`` delayed messages (due in a day) AND ``--backlog``
  messages claimed for 12 hours, so the queue holds ``2 * --backlog`` messages of which
  none is claimable.

Both queues are delayed queues with the same metadata; the only difference is the
backlog. Each round, for each queue (in random order, the two queues interleaved):

1. ``POST messages`` one ready message (``"delay": 0`` overrides the queue default);
2. ``POST claims?limit=1``: must claim exactly that message (201);
3. ``DELETE`` the message by id with its ``claim_id``;
4. ``POST claims?limit=1`` again: finds nothing (204).

Each request is timed alone on a keep-alive connection. The backlog is filled directly
through the storage driver (much faster than HTTP), into the same store the server uses,
under the same project.

Usage::

    python benchmarks/backlog.py [--driver sqlite|redis|swift] [--backlog 100000]
                                 [--samples 300] [--workers 1]

Results are printed as a table and written to ``benchmarks/results/backlog-<driver>.json``.

``--driver redis`` starts a ``redis-server`` of its own (a free loopback port, never the
default 6379, no persistence, files in the temporary directory), stops it at the end,
and also reports Redis memory per stored message: ``used_memory`` (``INFO memory``)
after the fill minus before, divided by the number of backlog messages.

``--driver swift`` starts an OpenStack Swift of its own: a fresh instance of the test
suite's ``tests.swift_server.SwiftCluster`` (proxy, account, container and object server,
memcached, all on free loopback ports, files in a temporary directory of its own), stopped
at the end. Swift stores every message as objects written one request at a time, so the
fill posts in parallel batches and claims 20 messages at a time (one thread), while a
second driver posts the delayed messages alongside. It is still slow: 12,000 + 12,000
messages took 11 minutes on two shared cores, five sixths of it claiming (about 20
messages a second), so 20,000 + 20,000 take about 20. Use a much smaller ``--backlog``
than for the other drivers. The JSON adds how long each part of the fill took and the
number of objects in each queue's container.

Adding a driver: write a ``Backend`` (configuration sections, backlog filler, and the
service it needs running, if any) and add it to ``BACKENDS``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import http.client
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PROJECT = "delayq-bench"
EMPTY_QUEUE = "bench-empty"
BACKLOG_QUEUE = "bench-backlog"
QUEUES = (EMPTY_QUEUE, BACKLOG_QUEUE)

# Backlog shape: delayed messages are due in a day (the run lasts minutes), claimed ones
# are held for 12 hours (Zaqar's max_claim_ttl); both live two weeks (max_message_ttl).
QUEUE_DELAY = 86400
MAX_MESSAGE_DELAY = 7 * 86400
BACKLOG_TTL = 1209600
BACKLOG_CLAIM_TTL = 43200
BACKLOG_CLAIM_GRACE = 60

# The measured messages: short-lived, claimed briefly, deleted at once.
READY_TTL = 3600
CLAIM_BODY = json.dumps({"ttl": 300, "grace": 60}).encode()
TARGET_RATIO = 1.5

OPERATIONS = (
    ("claim", "claim, 1 ready message (201)"),
    ("claim_empty", "claim, nothing ready (204)"),
    ("post", "post 1 message (201)"),
    ("delete", "delete by id + claim_id (204)"),
)

Sections = dict[str, dict[str, str]]
Progress = Callable[[str], None]
# What a fill reports besides its duration (for Redis: memory per message), or None.
FillInfo = dict[str, Any] | None


# Storage backends ------------------------------------------------------------------------


@contextlib.contextmanager
def no_service(sections: Sections, workdir: Path) -> Iterator[None]:
    """For a store that needs no process of its own (SQLite: a file)."""
    yield


@dataclass(frozen=True)
class Backend:
    """What the benchmark needs to know about one storage driver.

    ``sections(workdir)`` returns the driver's configuration sections (merged into the
    server's configuration file); ``service(sections, workdir)`` is a context manager that
    keeps the store running (a database server) for the whole run, and may complete
    *sections* with what is known only once the store runs (Swift's auth URL names its
    proxy's port); ``fill(sections, spec, progress)`` stores the backlog directly through
    the driver, given those same sections, and may return facts about it;
    ``describe(sections)`` runs once the API server has stopped, the store still up.
    """

    sections: Callable[[Path], Sections]
    fill: Callable[[Sections, BacklogSpec, Progress], FillInfo]
    describe: Callable[[Sections], dict[str, Any]] = lambda sections: {}
    service: Callable[[Sections, Path], AbstractContextManager[Any]] = no_service


@dataclass(frozen=True)
class BacklogSpec:
    project: str
    queue: str
    delayed: int
    claimed: int
    delay: int = QUEUE_DELAY
    ttl: int = BACKLOG_TTL
    claim_ttl: int = BACKLOG_CLAIM_TTL
    claim_grace: int = BACKLOG_CLAIM_GRACE
    batch: int = 10000
    client_id: str = field(default_factory=lambda: str(uuid.uuid4()))


def batches(total: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, count)`` pairs covering ``range(total)`` in chunks of *size*."""
    for start in range(0, total, size):
        yield start, min(size, total - start)


def sqlite_sections(workdir: Path) -> Sections:
    return {"drivers:message_store:sqlite": {"path": str(workdir / "delayq.sqlite")}}


def post_backlog(driver: Any, spec: BacklogSpec, start: int, count: int, delay: int
                 ) -> None:
    """Post messages ``start`` to ``start + count - 1`` of the backlog, in one request."""
    from delayq.message import NewMessage

    # Tiny bodies ({"n": 123456}): the memory figure is the one for a tiny message.
    driver.messages.post(spec.project, spec.queue, spec.client_id, [
        NewMessage(body={"n": start + i}, ttl=spec.ttl, delay=delay) for i in range(count)])


def claim_backlog(driver: Any, spec: BacklogSpec, count: int) -> None:
    """Claim *count* messages for *spec*'s long claim; all must be there to take."""
    claim = driver.claims.create(spec.project, spec.queue, ttl=spec.claim_ttl,
                                 grace=spec.claim_grace, limit=count, dead_letter=None)
    got = len(claim.messages) if claim else 0
    if got != count:
        raise RuntimeError(f"backlog claim took {got} messages, expected {count}")


def fill_backlog(driver: Any, spec: BacklogSpec, progress: Progress) -> None:
    """Store *spec*'s claimed, then delayed, messages through *driver*, batch by batch."""
    # Claimed backlog: post ready messages, then claim them right away, batch by batch
    # (the queue holds nothing claimable before the fill, so each claim takes exactly
    # the batch just posted).
    for start, count in batches(spec.claimed, spec.batch):
        post_backlog(driver, spec, start, count, 0)
        claim_backlog(driver, spec, count)
        progress(f"claimed {start + count}/{spec.claimed}")
    for start, count in batches(spec.delayed, spec.batch):
        post_backlog(driver, spec, start, count, spec.delay)
        progress(f"delayed {start + count}/{spec.delayed}")


def sqlite_fill(sections: Sections, spec: BacklogSpec, progress: Progress) -> FillInfo:
    from delayq.storage.sqlite.driver import Driver
    from delayq.synchronous import Synchronous

    driver = Synchronous(Driver(sections["drivers:message_store:sqlite"]["path"]))
    try:
        fill_backlog(driver, spec, progress)
        # Fold the write-ahead log into the database so that the measurement does not
        # pay for a checkpoint of the fill.
        driver.database.db().execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        driver.close()
    return None


def sqlite_describe(sections: Sections) -> dict[str, Any]:
    import sqlite3

    path = Path(sections["drivers:message_store:sqlite"]["path"])
    return {"sqlite_version": sqlite3.sqlite_version,
            "database_bytes": path.stat().st_size if path.exists() else None}


REDIS_GROUP = "drivers:message_store:redis"
REDIS_NAMESPACE = "dq"
REDIS_DEFAULT_PORT = 6379
REDIS_START_TIMEOUT = 30.0


class RedisServer:
    """A private ``redis-server`` on a loopback port, without persistence.

    Like the test suite's servers: ``--save ''`` and ``--appendonly no`` keep a 2-million
    message fill from writing snapshots (a fork and a disk write in the middle of a
    measurement), and the data directory and log live in the run's temporary directory.
    *extra* arguments come after those and override them (``--appendonly yes``).
    """

    def __init__(self, port: int, directory: Path, extra: Sequence[str] = ()) -> None:
        self.port = port
        self.directory = directory
        self.extra = list(extra)
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def start(self) -> None:
        import redis

        executable = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(executable).exists():
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [executable, "--bind", "127.0.0.1", "--port", str(self.port),
             "--dir", str(self.directory), "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--logfile", str(self.log_path), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + REDIS_START_TIMEOUT
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.exceptions.ConnectionError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        self.stop()
                        log = self.log_path.read_text(errors="replace") \
                            if self.log_path.exists() else ""
                        raise RuntimeError(f"redis-server on port {self.port} did not "
                                           f"start:\n{log}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def redis_client(sections: Sections) -> Any:
    """A plain redis-py client on the benchmark's Redis server (for INFO and key reads)."""
    import redis

    return redis.Redis.from_url(sections[REDIS_GROUP]["uri"])


def used_memory(sections: Sections) -> dict[str, int]:
    """``used_memory`` and ``used_memory_rss`` from ``INFO memory``, in bytes."""
    client = redis_client(sections)
    try:
        info = client.info("memory")
    finally:
        client.close()
    return {"used_memory": info["used_memory"], "used_memory_rss": info["used_memory_rss"]}


def redis_sections(workdir: Path) -> Sections:
    port = free_port()
    while port == REDIS_DEFAULT_PORT:  # never a Redis the machine may already run
        port = free_port()
    return {REDIS_GROUP: {"uri": f"redis://127.0.0.1:{port}/0", "namespace": REDIS_NAMESPACE}}


@contextlib.contextmanager
def redis_service(sections: Sections, workdir: Path, extra: Sequence[str] = ()
                  ) -> Iterator[RedisServer]:
    """The run's own redis-server, on the port of *sections*' uri, stopped on exit;
    *extra* are more ``redis-server`` arguments (``RedisServer``)."""
    port = urlsplit(sections[REDIS_GROUP]["uri"]).port
    if port is None:
        raise ValueError("the Redis uri names no port")
    server = RedisServer(port, workdir / "redis", extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def redis_fill(sections: Sections, spec: BacklogSpec, progress: Progress) -> FillInfo:
    """The backlog through the Redis driver, and Redis memory per stored message.

    ``used_memory`` is read before and after the fill. Nothing else writes meanwhile (the
    API server is idle between its queue creation and the measurement; its reaper only
    sets a lock key), so the difference is what the backlog messages cost: records, the
    three state indexes, the bucket indexes and the claim records of the fill's claims.
    """
    from delayq.storage.redis.driver import Driver
    from delayq.synchronous import Synchronous

    group = sections[REDIS_GROUP]
    driver = Synchronous(Driver(group["uri"], namespace=group["namespace"]))
    before = used_memory(sections)
    try:
        fill_backlog(driver, spec, progress)
    finally:
        driver.close()
    after = used_memory(sections)
    messages = spec.delayed + spec.claimed
    grown = after["used_memory"] - before["used_memory"]
    return {"messages": messages, "used_memory_before": before["used_memory"],
            "used_memory_after": after["used_memory"],
            "used_memory_rss_after": after["used_memory_rss"],
            "bytes_per_message": round(grown / messages, 1) if messages else None}


def redis_record(client: Any, prefix: str, index: str) -> dict[str, Any] | None:
    """How the message at the head of state index *index* (``"c"``, ``"d"``) is stored.

    Records are MessagePack values in hashes of 64 messages (``b:<seq // 64>``); Redis
    keeps such a hash as a compact listpack only while every value is at most
    ``hash-max-listpack-value`` bytes, else converts it to a hashtable.
    """
    first = client.zrange(prefix + index, 0, 0)
    if not first:
        return None
    seq = first[0].decode()
    bucket = f"{prefix}b:{int(seq, 36) // 64}"
    encoding = client.object("encoding", bucket)
    return {"bucket": bucket, "bucket_encoding": encoding.decode() if encoding else None,
            "bucket_messages": client.hlen(bucket),
            "bucket_bytes": client.memory_usage(bucket, samples=0),
            "record_bytes": client.hstrlen(bucket, seq)}


def redis_describe(sections: Sections) -> dict[str, Any]:
    """Server version and memory, and how the backlog queue's keys are stored."""
    from delayq.storage.redis.driver import Driver
    from delayq.synchronous import Synchronous

    group = sections[REDIS_GROUP]
    # The driver's own key layout, rather than a copy of it here.
    driver = Synchronous(Driver(group["uri"], namespace=group["namespace"]))
    prefix = driver.key_names.queue(PROJECT, BACKLOG_QUEUE)[:-1]  # without the final "s"
    driver.close()
    client = redis_client(sections)
    try:
        server = client.info("server")
        memory = client.info("memory")
        listpack_value = client.config_get("hash-max-listpack-value")
        return {
            "redis_version": server["redis_version"],
            "used_memory": memory["used_memory"],
            "used_memory_rss": memory["used_memory_rss"],
            "mem_fragmentation_ratio": memory.get("mem_fragmentation_ratio"),
            "keys": client.dbsize(),
            "hash_max_listpack_value": int(listpack_value["hash-max-listpack-value"]),
            "claimed_record": redis_record(client, prefix, "c"),
            "delayed_record": redis_record(client, prefix, "d"),
            "index_sizes": {name: client.zcard(prefix + name)
                            for name in ("r", "d", "c", "bi", "xb", "ce")},
        }
    finally:
        client.close()


SWIFT_GROUP = "drivers:message_store:swift"
SWIFT_PREFIX = "dqbench"
# The fill: messages per post_messages call (the driver writes their objects
# SWIFT_FILL_CONCURRENCY at a time), messages per claim (Zaqar's largest claim).
SWIFT_POST_BATCH = 500
SWIFT_CLAIM_LIMIT = 20
SWIFT_FILL_CONCURRENCY = 32
REPO_ROOT = Path(__file__).resolve().parent.parent


def swift_cluster() -> Any:
    """A fresh, not yet started ``tests.swift_server.SwiftCluster`` (the test suite's).

    Run as ``python benchmarks/backlog.py``, ``sys.path[0]`` is ``benchmarks/``: delayq is
    installed, but ``tests`` is a package of the checkout only, importable from the
    repository root, so the root goes on the path first (first, so that no ``tests``
    package some distribution installed at top level is taken for it).
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from tests.swift_server import SwiftCluster

    return SwiftCluster()


def swift_sections(workdir: Path) -> Sections:
    # auth_url, user and key: from the running Swift (swift_service).
    return {SWIFT_GROUP: {"container_prefix": SWIFT_PREFIX}}


@contextlib.contextmanager
def swift_service(sections: Sections, workdir: Path) -> Iterator[Any]:
    """The run's own Swift, stopped on exit; puts its credentials into *sections*."""
    cluster = swift_cluster()
    try:
        auth = cluster.auth()  # starts it, on free ports: about 2 s
        sections[SWIFT_GROUP].update(auth_url=auth.auth_url, user=auth.user, key=auth.key)
        yield cluster
    finally:
        cluster.stop_all()


def swift_connection(sections: Sections) -> Any:
    """A swiftclient connection to the run's Swift, without retries (as the driver's)."""
    from swiftclient.client import Connection

    group = sections[SWIFT_GROUP]
    return Connection(authurl=group["auth_url"], user=group["user"], key=group["key"],
                      retries=0, timeout=30)


def swift_driver(sections: Sections) -> Any:
    """A Swift driver as tests/contract/drivers.py opens one: the real clock (the proxy's,
    which the server's driver keeps time by too), the default claim settle time."""
    from delayq.storage.swift.driver import Driver
    from delayq.synchronous import Synchronous

    return Synchronous(Driver(lambda: swift_connection(sections),
                              prefix=sections[SWIFT_GROUP]["container_prefix"],
                              concurrency=SWIFT_FILL_CONCURRENCY))


class Tally:
    """The counts of a fill whose parts run in several threads, reported on one line."""

    def __init__(self, progress: Progress, totals: dict[str, int]) -> None:
        self.progress = progress
        self.totals = totals
        self.done = dict.fromkeys(totals, 0)
        self.lock = threading.Lock()

    def add(self, part: str, count: int) -> None:
        with self.lock:
            self.done[part] += count
            self.progress(" ".join(f"{name} {self.done[name]}/{total}"
                                   for name, total in self.totals.items()))


def post_part(driver: Any, spec: BacklogSpec, total: int, delay: int, tally: Tally,
              part: str, stop: threading.Event | None = None) -> float:
    """Post *total* messages in batches of SWIFT_POST_BATCH; the seconds it took."""
    started = time.perf_counter()
    for start, count in batches(total, SWIFT_POST_BATCH):
        if stop is not None and stop.is_set():
            break
        post_backlog(driver, spec, start, count, delay)
        tally.add(part, count)
    return time.perf_counter() - started


def claim_part(driver: Any, spec: BacklogSpec, tally: Tally) -> float:
    """Claim the posted messages SWIFT_CLAIM_LIMIT at a time; the seconds it took."""
    started = time.perf_counter()
    for _, count in batches(spec.claimed, SWIFT_CLAIM_LIMIT):
        claim_backlog(driver, spec, count)
        tally.add("claimed", count)
    return time.perf_counter() - started


def swift_fill(sections: Sections, spec: BacklogSpec, progress: Progress) -> FillInfo:
    """The backlog through two Swift drivers at once, and how long each part took.

    Every message is objects written one request each, so the fill is parallel: each
    ``post_messages`` of SWIFT_POST_BATCH messages writes them SWIFT_FILL_CONCURRENCY at a
    time. First the messages to claim are posted, ready; then one thread claims them,
    SWIFT_CLAIM_LIMIT at a time (a single claimer: claimers in parallel would bid for the
    same oldest messages), while the second driver posts the delayed ones, which no claim
    lists. The claims hold their messages for ``spec.claim_ttl`` (12 hours), far longer
    than the run: a claim expiring would show in the stats check after the measurement.
    """
    claimer, poster = swift_driver(sections), swift_driver(sections)
    tally = Tally(progress, {"posted": spec.claimed, "claimed": spec.claimed,
                             "delayed": spec.delayed})
    stop = threading.Event()  # ends the delayed posts early when a claim fails
    try:
        ready = post_part(claimer, spec, spec.claimed, 0, tally, "posted")
        with ThreadPoolExecutor(max_workers=1) as background:
            delayed = background.submit(post_part, poster, spec, spec.delayed, spec.delay,
                                        tally, "delayed", stop)
            try:
                claims = claim_part(claimer, spec, tally)
            except BaseException:
                stop.set()  # the pool's exit then waits for one batch, not for all
                raise
            posted = delayed.result()
    finally:
        claimer.close()
        poster.close()
    return {"post_batch": SWIFT_POST_BATCH, "claim_limit": SWIFT_CLAIM_LIMIT,
            "concurrency": SWIFT_FILL_CONCURRENCY,
            "seconds": {"post_ready": round(ready, 1), "claim": round(claims, 1),
                        "post_delayed_alongside": round(posted, 1)}}


def swift_describe(sections: Sections) -> dict[str, Any]:
    """Swift's version, the server's claim settle time, and the objects of each queue's
    container (messages, index entries, generation markers, claims)."""
    from delayq.storage.swift import layout
    from delayq.storage.swift.options import OPTS

    conn = swift_connection(sections)
    try:
        conn.get_auth()
        version = conn.get_capabilities().get("swift", {}).get("version")
        objects = {queue: int(conn.head_container(layout.container(
            SWIFT_PREFIX, PROJECT, queue))["x-container-object-count"]) for queue in QUEUES}
    finally:
        conn.close()
    settle = next(opt.default for opt in OPTS if opt.name == "claim_settle_time")
    return {"swift_version": version, "claim_settle_time": settle,
            "container_objects": objects}


BACKENDS: dict[str, Backend] = {
    "sqlite": Backend(sections=sqlite_sections, fill=sqlite_fill, describe=sqlite_describe),
    "redis": Backend(sections=redis_sections, fill=redis_fill, describe=redis_describe,
                     service=redis_service),
    "swift": Backend(sections=swift_sections, fill=swift_fill, describe=swift_describe,
                     service=swift_service),
}


# Server ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_config(path: Path, driver: str, port: int, workers: int,
                 driver_sections: Sections, wsgi: dict[str, str] | None = None,
                 extra: Sections | None = None) -> None:
    """The server's config file; *wsgi* adds ``[drivers:transport:wsgi]`` options,
    *extra* sections of their own."""
    sections: Sections = {
        "transport": {"max_message_delay": str(MAX_MESSAGE_DELAY)},
        "drivers": {"message_store": driver},
        "drivers:transport:wsgi": {"bind": "127.0.0.1", "port": str(port),
                                   "workers": str(workers), **(wsgi or {})},
        **driver_sections,
        **(extra or {}),
    }
    lines = []
    for name, options in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {value}" for key, value in options.items())
        lines.append("")
    path.write_text("\n".join(lines))


def server_command(config: Path) -> list[str]:
    """``delayq-server`` next to this interpreter, else the same entry point via -m."""
    script = shutil.which("delayq-server", path=str(Path(sys.executable).parent))
    base = [script] if script else [sys.executable, "-m", "delayq.server"]
    return [*base, "--config-file", str(config)]


class Server:
    """A ``delayq-server`` subprocess, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, config: Path, port: int, log: Path,
                 command: list[str] | None = None, tree: Path | None = None) -> None:
        """*command* runs another server answering ``GET /v2/ping`` with 204 (the same
        gunicorn set-up around another app: benchmarks/trivial_app.py); *tree*, a delayq
        source tree put first on ``PYTHONPATH``, serves another checkout's code."""
        self.port = port
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        # gunicorn (>= 25.1) opens a control socket at $XDG_RUNTIME_DIR/gunicorn.ctl, else
        # ~/.gunicorn/gunicorn.ctl, shared by every server of the user: keep ours private.
        env = {**os.environ, "XDG_RUNTIME_DIR": str(config.parent)}
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        self.proc = subprocess.Popen(command or server_command(config), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"delayq-server exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/v2/ping")
                status = conn.getresponse().status
                conn.close()
                if status == 204:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"delayq-server not ready after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        if not self._log.closed:  # closed by stop(); the file stays readable
            self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)  # gunicorn's graceful_timeout is 25 s
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


# HTTP client -----------------------------------------------------------------------------


class Client:
    """A keep-alive HTTP connection with delayq's headers; times each request."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT,
                        "Content-Type": "application/json", "Accept": "application/json"}

    def request(self, method: str, path: str, body: bytes | None = None
                ) -> tuple[int, Any, float]:
        """``(status, decoded JSON or None, seconds)`` of one request."""
        start = time.perf_counter()
        self.conn.request(method, path, body=body, headers=self.headers)
        response = self.conn.getresponse()
        raw = response.read()
        elapsed = time.perf_counter() - start
        return response.status, json.loads(raw) if raw else None, elapsed

    def expect(self, status: int, method: str, path: str, body: bytes | None = None
               ) -> tuple[Any, float]:
        got, document, elapsed = self.request(method, path, body)
        if got != status:
            raise RuntimeError(f"{method} {path}: expected {status}, got {got}: {document}")
        return document, elapsed

    def reconnect(self) -> None:
        """A fresh connection: the server drops one idle for longer than its keep-alive
        timeout (gunicorn's ``keepalive``, 2 s), as during the fill."""
        self.conn.close()
        self.conn.connect()

    def close(self) -> None:
        self.conn.close()


def post_ready(client: Client, queue: str) -> float:
    body = json.dumps({"messages": [{"body": {"bench": "ready"}, "ttl": READY_TTL,
                                     "delay": 0}]}).encode()
    _, elapsed = client.expect(201, "POST", f"/v2/queues/{queue}/messages", body)
    return elapsed


def one_round(client: Client, queue: str, samples: dict[str, list[float]]) -> None:
    """Post, claim, delete, claim-nothing on *queue*, recording each latency."""
    samples["post"].append(post_ready(client, queue))
    document, elapsed = client.expect(201, "POST", f"/v2/queues/{queue}/claims?limit=1",
                                      CLAIM_BODY)
    samples["claim"].append(elapsed)
    messages = document["messages"]
    if len(messages) != 1 or messages[0]["body"] != {"bench": "ready"}:
        raise RuntimeError(f"claim on {queue} returned {messages!r}")
    _, elapsed = client.expect(204, "DELETE", messages[0]["href"])  # carries ?claim_id=
    samples["delete"].append(elapsed)
    _, elapsed = client.expect(204, "POST", f"/v2/queues/{queue}/claims?limit=1",
                               CLAIM_BODY)
    samples["claim_empty"].append(elapsed)


def measure(client: Client, rounds: int, warmup: int, seed: int
            ) -> dict[str, dict[str, list[float]]]:
    """Interleaved rounds on both queues, in a random order each round."""
    rng = random.Random(seed)
    results = {queue: {op: [] for op, _ in OPERATIONS} for queue in QUEUES}
    scratch = {queue: {op: [] for op, _ in OPERATIONS} for queue in QUEUES}
    gc.collect()
    gc.disable()  # a collection in the client would land in one sample
    try:
        for index in range(warmup + rounds):
            order = list(QUEUES)
            rng.shuffle(order)
            target = results if index >= warmup else scratch
            for queue in order:
                one_round(client, queue, target[queue])
            if index % 64 == 63:
                gc.enable()
                gc.collect()
                gc.disable()
    finally:
        gc.enable()
    return results


# Statistics and report -------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, max(0, int(round(0.9 * len(ordered))) - 1))]
    return {"n": len(ordered), "median_ms": statistics.median(ordered) * 1000,
            "p90_ms": p90 * 1000, "min_ms": ordered[0] * 1000, "max_ms": ordered[-1] * 1000}


def report(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    table = {}
    for op, _ in OPERATIONS:
        empty = summary(samples[EMPTY_QUEUE][op])
        backlog = summary(samples[BACKLOG_QUEUE][op])
        table[op] = {"empty": empty, "backlog": backlog,
                     "ratio_median": backlog["median_ms"] / empty["median_ms"],
                     "ratio_p90": backlog["p90_ms"] / empty["p90_ms"]}
    return table


def print_table(table: dict[str, Any], backlog: int) -> None:
    groups = f"{'':31} | {'no backlog':^19} | {f'backlog {backlog:,} + {backlog:,}':^25} |"
    head = (f"{'operation':31} | {'median':>9} {'p90':>9} | {'median':>12} {'p90':>12} | "
            f"{'ratio (median)':>14}")
    print(groups)
    print(head)
    print("-" * len(head))
    for op, label in OPERATIONS:
        row = table[op]
        print(f"{label:31} | {row['empty']['median_ms']:7.3f}ms {row['empty']['p90_ms']:7.3f}ms"
              f" | {row['backlog']['median_ms']:10.3f}ms {row['backlog']['p90_ms']:10.3f}ms"
              f" | {row['ratio_median']:14.2f}")


def memory_line(fill_info: dict[str, Any]) -> str:
    """The store's memory per backlog message, from a fill's before/after figures."""
    grown = fill_info["used_memory_after"] - fill_info["used_memory_before"]
    return (f"memory per stored message: {fill_info['bytes_per_message']:.0f} bytes "
            f"(used_memory +{grown / 2**20:,.1f} MiB for {fill_info['messages']:,} "
            "messages)")


def stats(client: Client, queue: str) -> dict[str, Any]:
    document, elapsed = client.expect(200, "GET", f"/v2/queues/{queue}/stats")
    counts = {k: document["messages"][k] for k in ("free", "claimed", "delayed", "total")}
    return {**counts, "request_ms": round(elapsed * 1000, 2)}


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                            "python": platform.python_version()}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        info["loadavg_start"] = os.getloadavg()
    return info


# Main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="sqlite", choices=sorted(BACKENDS))
    parser.add_argument("--backlog", type=int, default=100000,
                        help="delayed messages, and as many claimed ones, in the backlog "
                             "queue (default 100000)")
    parser.add_argument("--samples", type=int, default=300,
                        help="measured rounds per queue (default 300)")
    parser.add_argument("--warmup", type=int, default=50,
                        help="unmeasured rounds per queue first (default 50)")
    parser.add_argument("--workers", type=int, default=1,
                        help="gunicorn worker processes (default 1)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the round order")
    parser.add_argument("--output", type=Path,
                        help="JSON results (default benchmarks/results/backlog-DRIVER.json)")
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when the claim median ratio exceeds {TARGET_RATIO}")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (config, data, server log)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backend = BACKENDS[args.driver]
    output = args.output or Path(__file__).resolve().parent / "results" / \
        f"backlog-{args.driver}.json"
    workdir = Path(tempfile.mkdtemp(prefix="delayq-backlog-"))
    sections = backend.sections(workdir)
    port = free_port()
    config = workdir / "delayq.conf"
    info = machine()

    def progress(message: str) -> None:
        print(f"\r  fill: {message:40}", end="", flush=True)

    server = None
    client = None
    services = contextlib.ExitStack()  # the store's own server, if any: stopped last
    try:
        print(f"delayq backlog benchmark: driver={args.driver} backlog={args.backlog:,} "
              f"delayed + {args.backlog:,} claimed, samples={args.samples}, "
              f"workers={args.workers}, {info['cpus']} CPUs")
        services.enter_context(backend.service(sections, workdir))
        # Written once the store runs: its service may complete the sections.
        write_config(config, args.driver, port, args.workers, sections)
        server = Server(config, port, workdir / "server.log")
        server.wait_ready()
        client = Client(port)
        metadata = json.dumps({"_default_message_delay": QUEUE_DELAY}).encode()
        for queue in QUEUES:
            client.expect(201, "PUT", f"/v2/queues/{queue}", metadata)

        started = time.perf_counter()
        fill_info = backend.fill(sections, BacklogSpec(
            project=PROJECT, queue=BACKLOG_QUEUE, delayed=args.backlog,
            claimed=args.backlog), progress) or {}
        fill_seconds = time.perf_counter() - started
        print(f"\r  fill: {2 * args.backlog:,} messages in {fill_seconds:.1f}s" + " " * 40)
        if "bytes_per_message" in fill_info:
            print(f"  {memory_line(fill_info)}")
        if "seconds" in fill_info:  # a fill in parts (Swift)
            print("  fill parts: " + ", ".join(f"{part} {seconds}s" for part, seconds
                                                 in fill_info["seconds"].items()))
        client.reconnect()

        before = {queue: stats(client, queue) for queue in QUEUES}
        expected = {"free": 0, "claimed": args.backlog, "delayed": args.backlog}
        got = {k: before[BACKLOG_QUEUE][k] for k in expected}
        if got != expected:
            raise RuntimeError(f"backlog queue holds {got}, expected {expected}")

        print(f"  measuring: {args.warmup} warm-up + {args.samples} rounds per queue, "
              "interleaved")
        started = time.perf_counter()
        samples = measure(client, args.samples, args.warmup, args.seed)
        measure_seconds = time.perf_counter() - started
        after = {queue: stats(client, queue) for queue in QUEUES}
        got = {k: after[BACKLOG_QUEUE][k] for k in expected}
        if got != expected:
            raise RuntimeError(f"backlog changed during the run: {got}, expected {expected}")
        # The API server stops first; the store is described while it still runs.
        client.close()
        client = None
        server.stop()
        server = None
        store = backend.describe(sections)
    except BaseException:
        if server is not None:
            print(f"\nserver log (tail):\n{server.log_tail()}", file=sys.stderr)
        print(f"kept for inspection: {workdir}", file=sys.stderr)
        raise
    finally:
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
        services.close()

    with contextlib.suppress(OSError):
        info["loadavg_end"] = os.getloadavg()
    table = report(samples)
    print()
    print_table(table, args.backlog)
    ratio = table["claim"]["ratio_median"]
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print(f"\nclaim median ratio backlog/empty: {ratio:.2f} (target <= {TARGET_RATIO}: "
          f"{verdict}); 204 claim ratio: {table['claim_empty']['ratio_median']:.2f}")
    print(f"stats request on the backlog queue: {after[BACKLOG_QUEUE]['request_ms']} ms "
          f"(informational)")
    if "bytes_per_message" in fill_info:
        print(memory_line(fill_info))

    result = {
        "benchmark": "backlog",
        "driver": args.driver,
        "backlog": {"delayed": args.backlog, "claimed": args.backlog,
                    "delay_seconds": QUEUE_DELAY, "claim_ttl": BACKLOG_CLAIM_TTL},
        "samples": args.samples,
        "warmup": args.warmup,
        "workers": args.workers,
        "fill_seconds": round(fill_seconds, 2),
        **({"fill": fill_info} if fill_info else {}),
        "measure_seconds": round(measure_seconds, 2),
        "target_ratio": TARGET_RATIO,
        "claim_ratio_median": ratio,
        "pass": ratio <= TARGET_RATIO,
        "results": table,
        "stats_before": before,
        "stats_after": after,
        "machine": info,
        "store": store,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {output}")
    if args.keep:
        print(f"kept: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if args.check and ratio > TARGET_RATIO else 0


if __name__ == "__main__":
    sys.exit(main())
