"""Crashes under load: a produce / consume / dead-letter workload runs over HTTP against
the real ``delayq-server`` (gunicorn, 2 workers) while worker processes are killed with
SIGKILL again and again — or while Redis, or the whole SQLite-backed server, is killed
and restarted. Afterwards every message is accounted for exactly once. Producers posting
under an ``Idempotency-Key`` repeat each unanswered post until it is answered, and then
every message is stored exactly once.

What a client was told is the contract; a request whose answer was lost to a crash may
or may not have taken effect:

- a post answered 201 was stored: its message is still queued (in the queue or its
  dead-letter queue) or a consumer deleted it after claiming it; a post with no answer
  may be there too, at most once;
- a delete answered 204 happened: that message is nowhere;
- no message is in the queues twice, nor in both.

Messages are told apart by their body (a serial per producer thread), not by id, so a
message that moved to the dead-letter queue is still the same message.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.redis_servers import SERVERS
from tests.server import RunningServer, child_pids, delayq_server, wait_until_serving

pytestmark = pytest.mark.timeout(180)

QUEUE = "work"
DEAD = "dead"
MAX_CLAIM_COUNT = 2
WORKLOAD_SECONDS = 8.0
CHAOS_DEADLINE = 60.0  # seconds the workload may run on to reach its crashes
PRODUCERS = 2
CONSUMERS = 3
KILLS = 5  # worker kills a run holds at least
RESTARTS = 2  # restarts of the store or server a run holds at least
NACK_SHARE = 0.3  # of claimed messages released instead of deleted: they dead-letter


@dataclass
class Ledger:
    """What the clients were told, by message body."""

    posted: set[str] = field(default_factory=set)  # answered 201
    maybe_posted: set[str] = field(default_factory=set)  # no answer
    deleted: set[str] = field(default_factory=set)  # answered 204
    maybe_deleted: set[str] = field(default_factory=set)  # no answer
    claimed: int = 0
    released: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def headers(project: str) -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": project}


def answered(send: Callable[..., httpx.Response], *args: object, **kwargs: object
             ) -> httpx.Response | None:
    """``send(*args, **kwargs)``'s response, or None when the request's fate is unknown:
    the connection broke (the worker died) or the server answered 5xx (its storage went
    away mid-request)."""
    try:
        response = send(*args, **kwargs)
    except httpx.TransportError:
        return None
    return None if response.status_code >= 500 else response


def produce(url: str, project: str, name: str, ledger: Ledger, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, headers=headers(project), timeout=10) as client:
        n = 0
        while not stop.is_set():
            bodies = [f"{name}-{n + i}" for i in range(4)]
            n += len(bodies)
            response = answered(client.post, f"/v2/queues/{QUEUE}/messages", json={
                "messages": [{"body": body, "ttl": 600, "delay": random.choice([0, 0, 1])}
                             for body in bodies]})
            with ledger.lock:
                if response is None:
                    ledger.maybe_posted.update(bodies)
                    continue
                assert response.status_code == 201, response.text
                ledger.posted.update(bodies)


def consume(url: str, project: str, ledger: Ledger, stop: threading.Event) -> None:
    rng = random.Random()
    with httpx.Client(base_url=url, headers=headers(project), timeout=10) as client:
        while not stop.is_set():
            response = answered(client.post, f"/v2/queues/{QUEUE}/claims",
                                params={"limit": 5}, json={"ttl": 60, "grace": 60})
            if response is None:
                continue
            if response.status_code == 204:
                time.sleep(0.05)
                continue
            assert response.status_code == 201, response.text
            claim = response.headers["location"].rsplit("/", 1)[-1]
            kept = False
            for message in response.json()["messages"]:
                with ledger.lock:
                    ledger.claimed += 1
                if rng.random() < NACK_SHARE:
                    kept = True
                    continue
                path = f"/v2/queues/{QUEUE}/messages/{message['id']}"
                deleted = answered(client.delete, path, params={"claim_id": claim})
                with ledger.lock:
                    if deleted is None:
                        ledger.maybe_deleted.add(message["body"])
                        continue
                    assert deleted.status_code == 204, deleted.text
                    ledger.deleted.add(message["body"])
            if kept:  # give the rest back: claimed again, they reach the DLQ
                released = answered(client.delete, f"/v2/queues/{QUEUE}/claims/{claim}")
                with ledger.lock:
                    ledger.released += released is not None


def run_for_a_while(jobs: list[Callable[[threading.Event], None]],
                    enough: Callable[[], bool], join_timeout: float = 60) -> None:
    """Each job in a thread of its own (until the event it is given is set) for
    WORKLOAD_SECONDS and then until ``enough()`` holds, at most CHAOS_DEADLINE seconds in
    all; the first thread's failure is raised here.

    ``enough`` counts what the chaos did: a restart takes seconds on a loaded machine, so
    a fixed length of time would hold fewer crashes than the test asserts."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def guarded(job: Callable[[threading.Event], None]) -> threading.Thread:
        def run() -> None:
            try:
                job(stop)
            except BaseException as exc:
                failures.append(exc)
                stop.set()
        return threading.Thread(target=run)

    threads = [guarded(job) for job in jobs]
    for thread in threads:
        thread.start()
    stop.wait(WORKLOAD_SECONDS)
    deadline = time.monotonic() + CHAOS_DEADLINE - WORKLOAD_SECONDS
    while not enough() and not stop.wait(0.1) and time.monotonic() < deadline:
        pass
    stop.set()
    for thread in threads:
        thread.join(join_timeout)
    if failures:
        raise failures[0]


def run_workload(url: str, project: str, chaos: Callable[[threading.Event], None],
                 enough: Callable[[], bool]) -> Ledger:
    """Producers and consumers while *chaos* runs in its own thread, as long as
    ``run_for_a_while`` says; every thread's failure is raised here."""
    ledger = Ledger()
    run_for_a_while([*(functools.partial(produce, url, project, f"p{i}", ledger)
                       for i in range(PRODUCERS)),
                     *(functools.partial(consume, url, project, ledger)
                       for _ in range(CONSUMERS)),
                     chaos], enough)
    return ledger


def queued_bodies(url: str, project: str, queue: str) -> list[str]:
    """Every live message of *queue*, claimed and delayed ones included."""
    bodies = []
    params = {"limit": 20, "echo": "true", "include_claimed": "true",
              "include_delayed": "true"}
    with httpx.Client(base_url=url, headers=headers(project), timeout=30) as client:
        while True:
            response = client.get(f"/v2/queues/{queue}/messages", params=params)
            assert response.status_code == 200, response.text
            page = response.json()
            bodies += [m["body"] for m in page["messages"]]
            following = [link for link in page["links"] if link["rel"] == "next"]
            if not page["messages"] or not following:
                return bodies
            params = dict(httpx.URL(following[0]["href"]).params)


def assert_accounted_for(url: str, project: str, ledger: Ledger) -> dict[str, int]:
    in_queue = queued_bodies(url, project, QUEUE)
    in_dead = queued_bodies(url, project, DEAD)
    seen = Counter(in_queue + in_dead)
    twice = sorted(body for body, n in seen.items() if n > 1)
    assert not twice, f"messages queued twice: {twice[:20]}"
    lost = sorted(ledger.posted - seen.keys() - ledger.deleted - ledger.maybe_deleted)
    assert not lost, f"acknowledged posts that are nowhere: {lost[:20]}"
    revived = sorted(ledger.deleted & seen.keys())
    assert not revived, f"acknowledged deletes still queued: {revived[:20]}"
    unknown = sorted(seen.keys() - ledger.posted - ledger.maybe_posted)
    assert not unknown, f"messages nobody posted: {unknown[:20]}"
    return {"posted": len(ledger.posted), "deleted": len(ledger.deleted),
            "queued": len(in_queue), "dead_lettered": len(in_dead)}


def create_queues(url: str, project: str) -> None:
    with httpx.Client(base_url=url, headers=headers(project), timeout=30) as client:
        assert client.put(f"/v2/queues/{DEAD}", json={}).status_code == 201
        response = client.put(f"/v2/queues/{QUEUE}", json={
            "_default_message_delay": 0, "_max_claim_count": MAX_CLAIM_COUNT,
            "_dead_letter_queue": DEAD})
        assert response.status_code == 201, response.text


def sqlite_config(directory: Path) -> dict:
    return {"drivers:message_store:sqlite": {"path": str(directory / "delayq.sqlite")},
            "transport": {"max_message_delay": 60}}


def redis_config(uri: str) -> dict:
    return {"drivers": {"message_store": "redis"},
            "drivers:message_store:redis": {"uri": uri,
                                            "namespace": f"crash{uuid.uuid4().hex[:10]}"},
            "transport": {"max_message_delay": 60}}


@contextlib.contextmanager
def two_workers(cwd: Path, config: dict) -> Iterator[RunningServer]:
    with delayq_server(cwd, config=config, args=["--workers", "2"]) as server:
        yield server


def worker_killer(server: RunningServer, kills: list[int]) -> Callable[[threading.Event], None]:
    """Chaos: SIGKILL a random worker every 0.3–0.7 s (gunicorn starts a new one)."""
    def chaos(stop: threading.Event) -> None:
        while not stop.wait(random.uniform(0.3, 0.7)):
            workers = child_pids(server.proc.pid)
            if workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(random.choice(workers), signal.SIGKILL)
                    kills.append(1)
    return chaos


@pytest.fixture(params=["sqlite", "redis"])
def config(request, tmp_path) -> dict:
    if request.param == "sqlite":
        return sqlite_config(tmp_path)
    return redis_config(SERVERS.single().uri)


def test_killed_workers_lose_and_duplicate_nothing(tmp_path, config):
    project = f"crash-{uuid.uuid4().hex[:6]}"
    with two_workers(tmp_path / "server", config) as server:
        create_queues(server.url, project)
        kills: list[int] = []
        ledger = run_workload(server.url, project, worker_killer(server, kills),
                              lambda: len(kills) >= KILLS)
        wait_until_serving(server)
        tally = assert_accounted_for(server.url, project, ledger)
    # The run must have been a real one: workers died while messages flowed both ways.
    assert len(kills) >= KILLS, kills
    assert tally["posted"] >= 50 and tally["deleted"] >= 20, tally
    assert ledger.released > 0 and tally["dead_lettered"] > 0, (ledger, tally)


# Idempotent posts: producers repeat every unanswered post under its key.

KEYED = "keyed"
KEYED_PRODUCERS = 3
RETRY_DEADLINE = 60.0  # seconds a producer repeats one post before the test fails


@dataclass
class KeyedLedger:
    posted: set[str] = field(default_factory=set)  # answered 201, after any repeats
    repeats: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def keyed_produce(url: str, project: str, name: str, ledger: KeyedLedger,
                  stop: threading.Event) -> None:
    """Post batches of 3 under a key each, repeating a post (same key, same body) until
    it is answered."""
    with httpx.Client(base_url=url, headers=headers(project), timeout=10) as client:
        n = 0
        while not stop.is_set():
            bodies = [f"{name}-{n + i}" for i in range(3)]
            n += len(bodies)
            document = {"messages": [{"body": body, "ttl": 600} for body in bodies]}
            key = {"Idempotency-Key": f"{name}-{n}"}
            deadline = time.monotonic() + RETRY_DEADLINE
            while (response := answered(client.post, f"/v2/queues/{KEYED}/messages",
                                        json=document, headers=key)) is None:
                assert time.monotonic() < deadline, f"post {key} never answered"
                with ledger.lock:
                    ledger.repeats += 1
                time.sleep(0.05)
            assert response.status_code == 201, response.text
            with ledger.lock:
                ledger.posted.update(bodies)


def test_repeated_keyed_posts_store_each_message_exactly_once(tmp_path, config):
    """Workers are killed while producers post under keys and repeat every post that got
    no answer: in the end each message is in the queue once, none lost, none doubled."""
    project = f"crash-{uuid.uuid4().hex[:6]}"
    ledger = KeyedLedger()
    kills: list[int] = []
    with two_workers(tmp_path / "server", config) as server:
        run_for_a_while([*(functools.partial(keyed_produce, server.url, project, f"k{i}",
                                             ledger) for i in range(KEYED_PRODUCERS)),
                         worker_killer(server, kills)], lambda: len(kills) >= KILLS,
                        join_timeout=RETRY_DEADLINE + 10)
        wait_until_serving(server)
        stored = Counter(queued_bodies(server.url, project, KEYED))
    assert not [body for body, n in stored.items() if n > 1]
    assert set(stored) == ledger.posted
    assert len(kills) >= KILLS, kills
    assert ledger.repeats > 0 and len(ledger.posted) >= 60, (ledger.repeats,
                                                              len(ledger.posted))


def test_a_redis_restart_loses_nothing_acknowledged(tmp_path):
    """Redis with AOF on is killed (SIGKILL) mid-workload and started again on its data.

    ``appendfsync always``, because it is the setting that promises this: under
    ``everysec`` Redis holds its AOF write back while a background fsync runs yet still
    answers, so a kill then loses acknowledged writes (the operator guide's persistence
    table; ``benchmarks/redis_aof_loss.py`` shows it)."""
    redis_server = SERVERS.fresh("--appendonly", "yes", "--appendfsync", "always")
    project = f"crash-{uuid.uuid4().hex[:6]}"
    restarts: list[int] = []

    def restart_redis(stop: threading.Event) -> None:
        while not stop.wait(random.uniform(1.5, 2.5)):
            redis_server.process.kill()
            redis_server.process.wait()
            time.sleep(0.3)
            redis_server.start()
            restarts.append(1)

    with two_workers(tmp_path / "server", redis_config(redis_server.uri)) as server:
        create_queues(server.url, project)
        ledger = run_workload(server.url, project, restart_redis,
                              lambda: len(restarts) >= RESTARTS)
        wait_until_serving(server)
        tally = assert_accounted_for(server.url, project, ledger)
    assert len(restarts) >= RESTARTS, restarts
    assert tally["posted"] >= 50 and tally["deleted"] >= 20, tally


def test_a_killed_sqlite_server_loses_nothing_acknowledged(tmp_path):
    """The whole server (master and workers) is killed and started again on its file."""
    project = f"crash-{uuid.uuid4().hex[:6]}"
    config = sqlite_config(tmp_path)
    port = None
    restarts: list[int] = []
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(two_workers(tmp_path / "first", config))
        port = server.port
        create_queues(server.url, project)

        def kill_server(stop: threading.Event) -> None:
            nonlocal server
            while not stop.wait(random.uniform(1.5, 2.5)):
                os.killpg(server.proc.pid, signal.SIGKILL)
                server.proc.wait()
                server = stack.enter_context(delayq_server(
                    tmp_path / f"again{len(restarts)}", config=config,
                    args=["--workers", "2", "--port", str(port)]))
                restarts.append(1)

        ledger = run_workload(server.url, project, kill_server,
                              lambda: len(restarts) >= RESTARTS)
        tally = assert_accounted_for(server.url, project, ledger)
    assert len(restarts) >= RESTARTS, restarts
    assert tally["posted"] >= 50 and tally["deleted"] >= 20, tally
