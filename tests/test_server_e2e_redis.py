"""End to end on the Redis driver: the real ``delayq-server`` (gunicorn + uvicorn workers)
over a real redis-server, one node and a 3-master Redis Cluster, driven over loopback HTTP
by python-zaqarclient (and by httpx where the raw response matters).

Every test starts its own server on a key namespace of its own, so tests sharing a Redis
never see each other's keys. The Redis servers come from ``tests/redis_servers.py``.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from redis.crc import key_slot
from zaqarclient.queues.v2 import core
from zaqarclient.transport import errors as zerrors

from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous
from tests.redis_servers import SERVERS, RedisServer
from tests.server import (
    RunningServer,
    child_pids,
    delayq_server,
    free_port,
    wait_until_serving,
)
from tests.test_server_e2e import (
    PROJECT,
    assert_claimed_once_by_concurrent_consumers,
    assert_healthy,
    counts,
    http_headers,
    make_client,
    posted_ids,
    unique,
)

pytestmark = pytest.mark.timeout(120)

BACKENDS = ["redis", "redis-cluster"]
MAX_MESSAGE_DELAY = 60


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def redis_uri(backend) -> str:
    return SERVERS.single().uri if backend == "redis" else SERVERS.cluster_uri()


@pytest.fixture
def namespace() -> str:
    """This test's key prefix: apart from every other test's on the shared Redis."""
    return f"e2e{uuid.uuid4().hex[:12]}"


def redis_config(uri: str, namespace: str, **redis_options: object) -> dict:
    return {"drivers": {"message_store": "redis"},
            "drivers:message_store:redis": {"uri": uri, "namespace": namespace,
                                            **redis_options},
            "transport": {"max_message_delay": MAX_MESSAGE_DELAY}}


@pytest.fixture
def serve(tmp_path, redis_uri, namespace) -> Iterator[Callable[..., RunningServer]]:
    """Start ``delayq-server`` on this test's Redis and namespace; all stop after the test."""
    with contextlib.ExitStack() as stack:
        def start(args: list[str] | None = None) -> RunningServer:
            cwd = tmp_path / f"server-{uuid.uuid4().hex[:6]}"
            return stack.enter_context(delayq_server(
                cwd, config=redis_config(redis_uri, namespace), args=args))

        yield start


@pytest.fixture
def server(serve) -> RunningServer:
    return serve()


@pytest.fixture
def store(redis_uri, namespace, backend) -> Iterator[Driver]:
    """The Redis driver in this process, on the server's Redis and namespace: the keys the
    server writes, and a client to look at them."""
    driver = Synchronous(Driver(redis_uri, namespace=namespace))
    assert driver.cluster is (backend == "redis-cluster")
    yield driver
    driver.close()


def ids_of(messages) -> list[str]:
    return [m.id for m in messages]


def next_marker(listing) -> str | None:
    """The marker of a zaqarclient listing's "next" link."""
    for link in listing._links:
        if link["rel"] == "next":
            return parse_qs(urlsplit(link["href"]).query)["marker"][0]
    return None


def test_health_names_the_redis_store(server, store):
    c = make_client(server.url)
    assert c.ping() is True
    assert_healthy(c.health(), "redis")
    # The server writes under its namespace: a queue's state hash is where the driver says.
    name = unique("health")
    c.queue(name, force_create=True)
    assert store._client.exists(store.key_names.queue(PROJECT, name)) == 1


# The suite's Redis servers keep no append-only file, as an operator should not.
PERSISTENCE_WARNING = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] \[(\d+)\] \[WARNING\] "
    r"delayq\.storage\.redis\.persistence: Redis at (127\.0\.0\.1:\d+): appendonly is "
    r"not yes: a restart of redis-server loses every acknowledged message")


def test_the_worker_logs_that_redis_keeps_no_aof(server, backend):
    """In gunicorn's log format, with the worker's pid and each Redis server's address."""
    [worker] = child_pids(server.proc.pid)
    found = [m.groups() for m in map(PERSISTENCE_WARNING.match, server.stderr().splitlines())
             if m]
    assert {int(pid) for pid, _ in found} == {worker}, server.stderr()
    assert len({address for _, address in found}) == (1 if backend == "redis" else 3)


# 1. Delayed queues


def test_delayed_queue(server):
    c = make_client(server.url)
    q = c.queue(unique("delayed"), force_create=True)
    q.metadata(new_meta={"_default_message_delay": 2})
    assert q.metadata(force_reload=True)["_default_message_delay"] == 2
    with pytest.raises(zerrors.MalformedRequest):
        q.post({"body": "too late", "delay": MAX_MESSAGE_DELAY + 1})

    before_post = time.time()
    ids = posted_ids(q.post([{"body": "default"}, {"body": "now", "delay": 0},
                             {"body": "late", "delay": 4}]))
    after_post = time.time()
    default, now, late = ids

    early_claim = q.claim(ttl=60, limit=10)
    early = list(early_claim)
    listed = ids_of(q.messages(echo=True, include_claimed=True))
    listed_with_delayed = ids_of(q.messages(echo=True, include_claimed=True,
                                            include_delayed=True))
    early_stats = counts(q)
    if time.time() >= before_post + 2:
        pytest.skip("the machine stalled for 2 s after the post: the delay cannot be "
                    "checked this run")
    # Before it is due, a delayed message is neither claimable nor listed, unless asked.
    assert [(m.id, m.body) for m in early] == [(now, "now")]
    assert listed == [now]
    assert listed_with_delayed == ids
    assert early_stats == {"free": 0, "claimed": 1, "delayed": 2, "total": 3}
    assert q.message(default).body == "default"  # readable by id while delayed
    early[0].delete()

    # Due after 2 s: listed without include_delayed, and claimed by the first claim.
    time.sleep(max(0.0, after_post + 2.3 - time.time()))
    due_listed = ids_of(q.messages(echo=True))
    due_listed_with_delayed = ids_of(q.messages(echo=True, include_delayed=True))
    due_claim = q.claim(ttl=60, limit=10)
    due = list(due_claim)
    if time.time() >= before_post + 4:
        pytest.skip("the machine stalled for 2 s: the 4 s delay cannot be checked this run")
    assert due_listed == [default]
    assert due_listed_with_delayed == [default, late]
    assert [(m.id, m.body, m.claim_count) for m in due] == [(default, "default", 1)]
    assert due[0].claim_id == due_claim.id
    due[0].delete()

    time.sleep(max(0.0, after_post + 4.3 - time.time()))
    assert ids_of(q.messages(echo=True)) == [late]
    assert [(m.id, m.body) for m in q.claim(ttl=60, limit=10)] == [(late, "late")]
    assert counts(q) == {"free": 0, "claimed": 1, "delayed": 0, "total": 1}


# 2. Post, list with paging, claim, renew, release, delete, pop


def test_post_list_claim_renew_release_delete_pop(server):
    producer, consumer = make_client(server.url), make_client(server.url)
    name = unique("work")
    pq = producer.queue(name)  # no request: the post creates the queue
    ids = posted_ids(pq.post([{"body": {"i": i}, "ttl": 600} for i in range(10)]))
    assert len(set(ids)) == 10
    cq = consumer.queue(name, auto_create=False)
    assert cq.exists()
    assert list(pq.messages()) == []  # no echo: a producer does not see its own messages
    assert cq.message(ids[3]).body == {"i": 3}

    # Pages of four; the marker of a page still works after a message before it is gone.
    first = cq.messages(limit=4)
    assert [m.body for m in first] == [{"i": i} for i in range(4)]
    marker = next_marker(first)
    assert marker
    cq.delete_messages(ids[4])  # unclaimed: deleted without a claim
    second = cq.messages(limit=4, marker=marker)
    assert ids_of(second) == ids[5:9]
    third = cq.messages(limit=4, marker=next_marker(second))
    assert ids_of(third) == ids[9:]
    assert list(cq.messages(limit=4, marker=next_marker(third))) == []
    remaining = ids[:4] + ids[5:]
    assert ids_of(cq.messages(limit=3).stream()) == remaining  # follows the next links

    # Claim: the oldest three, hidden from listings and other claims.
    claim = cq.claim(ttl=60, grace=60, limit=3)
    claimed = list(claim)
    assert ids_of(claimed) == ids[:3]
    assert all(m.claim_id == claim.id and m.claim_count == 1 for m in claimed)
    assert ids_of(cq.messages(limit=20)) == ids[3:4] + ids[5:]
    assert ids_of(cq.messages(limit=20, include_claimed=True)) == remaining
    assert counts(cq) == {"free": 6, "claimed": 3, "delayed": 0, "total": 9}
    fetched = consumer.queue(name, auto_create=False).claim(id=claim.id)
    assert (fetched.ttl, sorted(ids_of(fetched))) == (60, sorted(ids[:3]))

    # Renew.
    claim.update(ttl=120, grace=90)
    renewed = cq.claim(id=claim.id)
    assert (renewed.ttl, sorted(ids_of(renewed))) == (120, sorted(ids[:3]))

    # Delete needs the claim id: without it, or with another claim's, 403 with JSON.
    url = f"{server.url}/v2/queues/{name}/messages/{ids[0]}"
    other = cq.claim(ttl=60, limit=1)
    [other_message] = list(other)
    assert other_message.id == ids[3]
    for params in ({}, {"claim_id": other.id}):
        refused = httpx.delete(url, params=params, headers=http_headers(), timeout=30)
        assert refused.status_code == 403, refused.text
        assert set(refused.json()) == {"title", "description"}
    claimed[0].delete()  # the client sends ?claim_id= of the message's own claim
    with pytest.raises(zerrors.ResourceNotFound):
        cq.message(ids[0])
    other_message.delete()
    assert counts(cq) == {"free": 5, "claimed": 2, "delayed": 0, "total": 7}

    # Release: the claim is gone and its messages are free again, claimed once so far.
    claim.delete()
    with pytest.raises(zerrors.ResourceNotFound):
        cq.claim(id=claim.id).ttl  # noqa: B018
    assert counts(cq) == {"free": 7, "claimed": 0, "delayed": 0, "total": 7}
    again = cq.claim(ttl=60, limit=20)
    assert sorted((m.id, m.claim_count) for m in again) == sorted(
        [(ids[1], 2), (ids[2], 2)] + [(id_, 1) for id_ in ids[5:]])
    again.delete()

    # Pop: returns and deletes, claims or not.
    left = ids[1:3] + ids[5:]
    popped = list(cq.pop(3))
    assert len(popped) == 3 and set(ids_of(popped)) <= set(left)
    for m in popped:
        with pytest.raises(zerrors.ResourceNotFound):
            cq.message(m.id)
    rest = [id_ for id_ in left if id_ not in ids_of(popped)]
    assert sorted(ids_of(cq.messages(limit=20))) == sorted(rest)
    cq.delete_messages(*rest)
    assert list(cq.pop(5)) == []
    assert counts(cq) == {"free": 0, "claimed": 0, "delayed": 0, "total": 0}


# 3. Dead-letter queues, across cluster slots


def queue_pair(store: Driver, project: str, *, same_slot: bool) -> tuple[str, str]:
    """A source and a dead-letter queue name whose keys share a slot, or do not (and on a
    cluster then live on different masters)."""
    by_slot: dict[int, str] = {}
    while True:
        name = unique("dl")
        key = store.key_names.queue(project, name)
        slot = key_slot(key.encode())
        if same_slot:
            if slot in by_slot:
                return by_slot[slot], name
            by_slot[slot] = name
            continue
        for other_slot, other in by_slot.items():
            other_key = store.key_names.queue(project, other)
            if other_slot != slot and (not store.cluster or (
                    store._client.get_node_from_key(key)
                    != store._client.get_node_from_key(other_key))):
                return other, name
        by_slot[slot] = name


@pytest.mark.parametrize("slots", ["cross-slot", "same-slot"])
def test_dead_letter_queue(server, store, backend, slots):
    c = make_client(server.url)
    project = PROJECT
    name, dlq_name = queue_pair(store, project, same_slot=slots == "same-slot")
    source_key = store.key_names.queue(project, name)
    dlq_key = store.key_names.queue(project, dlq_name)
    assert (key_slot(source_key.encode()) != key_slot(dlq_key.encode())) is (
        slots == "cross-slot")
    # On the cluster the move then goes through the source queue's outbox.
    assert store.same_slot(source_key, dlq_key) is (slots == "same-slot" or backend == "redis")

    req, trans = c._request_and_transport()
    core.queue_create(trans, req, name,
                      metadata={"_max_claim_count": 1, "_dead_letter_queue": dlq_name})
    q = c.queue(name, auto_create=False)
    dlq = c.queue(dlq_name, auto_create=False)
    assert not dlq.exists()
    [id_] = posted_ids(q.post({"body": {"order": 42}, "ttl": 600}))
    [keep] = posted_ids(q.post({"body": "stays"}))

    claim = q.claim(ttl=60, grace=60, limit=1)
    [claimed] = list(claim)
    assert (claimed.id, claimed.body, claimed.claim_count) == (id_, {"order": 42}, 1)
    claim.delete()  # release: free again, claimed once

    # The next claim moves it (claimed max_claim_count times) and claims the next one.
    again = q.claim(ttl=60, grace=60, limit=5)
    assert [(m.id, m.body) for m in again] == [(keep, "stays")]
    with pytest.raises(zerrors.ResourceNotFound):
        q.message(id_)
    assert counts(q) == {"free": 0, "claimed": 1, "delayed": 0, "total": 1}

    assert dlq.exists()  # created by the move
    assert dlq_name in [x.name for x in c.queues(limit=20)[0]]
    assert counts(dlq) == {"free": 1, "claimed": 0, "delayed": 0, "total": 1}
    listed = list(dlq.messages(echo=True))
    assert [(m.id, m.body, m.claim_count) for m in listed] == [(id_, {"order": 42}, 1)]
    moved = dlq.message(id_)
    assert (moved.id, moved.body, moved.claim_count) == (id_, {"order": 42}, 1)
    response = httpx.get(f"{server.url}/v2/queues/{dlq_name}/messages/{id_}",
                         params={"details": "true"}, headers=http_headers(), timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["source_queue"] == name

    # The move is complete: no outbox entry is left behind, both queues are where the
    # driver's keys say. Only a move across slots went through the outbox, which leaves
    # its token in the dead-letter queue's move markers ('mv').
    assert store._client.exists(store.key_names.outbox(project, name)) == 0
    crossed = int(slots == "cross-slot" and backend == "redis-cluster")
    assert store._client.zcard(dlq_key[:-1] + "mv") == crossed
    assert store._client.exists(source_key) == 1
    assert store._client.exists(dlq_key) == 1

    [reclaimed] = list(dlq.claim(ttl=60, grace=60))
    assert (reclaimed.id, reclaimed.body, reclaimed.claim_count) == (id_, {"order": 42}, 2)
    reclaimed.delete()
    assert counts(dlq)["total"] == 0


# 4. Several worker processes


def test_concurrent_claims_across_two_workers_deliver_each_message_once(serve):
    server = serve(args=["--workers", "2"])
    deadline = time.monotonic() + 30
    while len(child_pids(server.proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = child_pids(server.proc.pid)
    assert len(workers) == 2, server.stderr()

    assert_claimed_once_by_concurrent_consumers(server.url)
    assert child_pids(server.proc.pid) == workers, server.stderr()  # none crashed


# 5. Redis unreachable


def unreachable_uri(backend: str) -> str:
    """A redis:// URI nothing listens on: one node, or three cluster seeds."""
    count = 1 if backend == "redis" else 3
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return "redis://" + ",".join(f"127.0.0.1:{p}" for p in sorted(ports)) + "/0"


def test_unreachable_redis_answers_503_and_the_server_stays_up(tmp_path: Path, backend):
    uri = unreachable_uri(backend)
    config = redis_config(uri, f"e2e{uuid.uuid4().hex[:12]}")
    with delayq_server(tmp_path, config=config, wait=False) as server:
        # It starts and serves HTTP; its storage is down, so ping answers 503.
        wait_until_serving(server, statuses=(503,))
        [worker] = child_pids(server.proc.pid)
        c = make_client(server.url)
        name = unique("down")
        q = c.queue(name, auto_create=False)
        url = f"{server.url}/v2/queues/{name}"
        requests: dict[str, Callable[[], object]] = {
            "health": lambda: httpx.get(f"{server.url}/v2/health", timeout=60),
            "create": lambda: httpx.put(url, json={}, headers=http_headers(), timeout=60),
            "post": lambda: httpx.post(f"{url}/messages", json={"messages": [{"body": 1}]},
                                       headers=http_headers(), timeout=60),
            "claim": lambda: httpx.post(f"{url}/claims", json={}, headers=http_headers(),
                                        timeout=60),
            "list": lambda: httpx.get(f"{server.url}/v2/queues", headers=http_headers(),
                                      timeout=60),
            "ping": c.ping,
            "client_post": lambda: q.post({"body": "x"}),
            "client_claim": lambda: list(q.claim(ttl=60)),
            "client_stats": lambda: q.stats,
            "client_messages": lambda: list(q.messages(echo=True)),
        }

        def timed(call: Callable[[], object]) -> tuple[float, object]:
            started = time.monotonic()
            try:
                result = call()
            except Exception as exc:  # noqa: BLE001 - the error is the result
                result = exc
            return time.monotonic() - started, result

        # All at once: each waits out the Redis client's retries, not one after another.
        with ThreadPoolExecutor(len(requests)) as pool:
            futures = {key: pool.submit(timed, call) for key, call in requests.items()}
            results = {key: f.result(timeout=60) for key, f in futures.items()}

        slow = {key: round(elapsed, 1) for key, (elapsed, _) in results.items() if elapsed > 15}
        assert slow == {}, "answers took too long"
        health = results["health"][1]
        assert health.status_code == 503
        assert health.json() == {"storage_reachable": False, "message_store": "redis",
                                 "operation_status": {}}
        for key in ("create", "post", "claim", "list"):
            response = results[key][1]
            assert response.status_code == 503, (key, response.status_code, response.text)
            # The store's name, nothing of its address or of how it failed.
            assert response.json() == {
                "title": "Service temporarily unavailable",
                "description": "The message store (redis) is temporarily unavailable; "
                               "retry the request later."}, key
        assert results["ping"][1] is False
        for key in ("client_post", "client_claim", "client_stats", "client_messages"):
            error = results[key][1]
            assert isinstance(error, zerrors.ServiceUnavailableError), (key, error)
            # zaqarclient read the JSON error body (it says "Text:" when it cannot).
            assert "Title: Service temporarily unavailable." in str(error), (key, error)

        # Still up, on the same worker: nothing crashed or restarted.
        assert server.proc.poll() is None, server.stderr()
        assert child_pids(server.proc.pid) == [worker], server.stderr()
        assert httpx.get(f"{server.url}/v2/ping", timeout=30).status_code == 503
        assert "Traceback" not in server.stderr()
        # The address and the cause are in the server's log instead.
        addresses = uri.split("//", 1)[1].split("/")[0].split(",")
        warned = [line for line in server.stderr().splitlines()
                  if "[WARNING] delayq.api.errors: The redis message store is unavailable"
                  in line]
        assert any(f"connecting to {address}" in line
                   for line in warned for address in addresses), server.stderr()

        if backend == "redis":
            # Redis comes up where the config points: the same server now works.
            redis_server = RedisServer(int(uri.rsplit(":", 1)[1].split("/")[0]),
                                       tmp_path / "redis-late")
            try:
                redis_server.start()
                wait_until_serving(server, timeout=15)
                assert_healthy(c.health(), "redis")
                [id_] = posted_ids(q.post({"body": "back"}))
                assert [(m.id, m.body) for m in q.claim(ttl=60)] == [(id_, "back")]
                assert child_pids(server.proc.pid) == [worker], server.stderr()
            finally:
                redis_server.stop()


@contextlib.contextmanager
def silent_redis(count: int) -> Iterator[str]:
    """*count* listening sockets that accept connections and never answer: a Redis that
    stopped responding (or a host that swallows packets). Their redis:// URI."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)  # the kernel completes the handshakes; nobody ever reads
            ports.append(sock.getsockname()[1])
        yield "redis://" + ",".join(f"127.0.0.1:{p}" for p in ports) + "/0"


def test_unresponsive_redis_answers_503_within_the_timeouts_even_when_busy(
        tmp_path: Path, backend):
    """Redis accepts connections but never replies. ``socket_timeout`` is "seconds to wait
    for a Redis reply before the request fails with 503": every request, alone or with
    others in flight, answers 503 within a few times the configured timeouts."""
    connect_timeout = socket_timeout = 0.1
    # Generous: the driver's own three attempts, each waiting both timeouts, and more.
    bound = 5 * (connect_timeout + socket_timeout)
    with silent_redis(1 if backend == "redis" else 3) as uri:
        config = redis_config(uri, f"e2e{uuid.uuid4().hex[:12]}")
        config["drivers:message_store:redis"].update(
            socket_timeout=socket_timeout, connect_timeout=connect_timeout)
        with delayq_server(tmp_path, config=config, wait=False) as server:
            wait_until_serving(server, statuses=(503,))
            name = unique("silent")

            def post(i: int) -> tuple[str, float, object]:
                q = make_client(server.url).queue(name, auto_create=False)
                started = time.monotonic()
                try:
                    result: object = q.post({"body": i})
                except zerrors.TransportError as exc:
                    result = exc
                return f"post {i}", time.monotonic() - started, result

            def health() -> tuple[str, float, object]:
                started = time.monotonic()
                response = httpx.get(f"{server.url}/v2/health", timeout=120)
                return "health", time.monotonic() - started, response.status_code

            alone = [post(-1)]
            with ThreadPoolExecutor(8) as pool:
                futures = [pool.submit(post, i) for i in range(7)] + [pool.submit(health)]
                together = [f.result(timeout=110) for f in futures]

            for what, _, result in alone + together:
                if what == "health":
                    assert result == 503
                else:
                    assert isinstance(result, zerrors.ServiceUnavailableError), (what, result)
            assert server.proc.poll() is None, server.stderr()
            times = {what: round(elapsed, 2) for what, elapsed, _ in alone + together}
            slow = {what: elapsed for what, elapsed in times.items() if elapsed > bound}
            assert slow == {}, (f"answers slower than {bound:.1f} s with socket_timeout and "
                                f"connect_timeout {socket_timeout} s: {times}")
