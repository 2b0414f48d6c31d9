"""What only the Redis driver promises, beyond the shared contract suite.

Memory per message and no leaks (INFO memory on a server of the test's own), the server's
clock, one hash slot per queue, scripts called by hash, and the cross-slot dead-letter
move surviving a process killed between its steps.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
import uuid
from collections import Counter

import msgpack
import pytest
import redis
from redis.crc import key_slot

from delayq import errors, events
from delayq.broker import Broker
from delayq.message import LISTING_START, NewMessage
from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous
from delayq.validation import Limits, PostedMessage, Quotas
from tests.contract.drivers import FakeClock
from tests.redis_servers import SERVERS

SPAWN = multiprocessing.get_context("spawn")
PROJECT = "p"
CLIENT = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"
MAX_BYTES_PER_MESSAGE = 250


def namespace() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def post(driver: Driver, queue: str, count: int, *, ttl: int = 3600, delay: int = 0,
         body: object = 1) -> list[str]:
    ids = []
    for start in range(0, count, 1000):
        batch = [NewMessage(body, ttl, delay) for _ in range(min(1000, count - start))]
        ids += driver.messages.post(PROJECT, queue, CLIENT, batch)
    return ids


@pytest.fixture(scope="module")
def own_server():
    """A Redis of this module's own, so INFO memory sees only what the tests store."""
    return SERVERS.fresh()


def used_memory(client: redis.Redis) -> int:
    # Freed structures go away in the background (UNLINK); wait until that is done.
    deadline = time.monotonic() + 10
    while client.info("memory").get("lazyfree_pending_objects", 0) and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    return client.info("memory")["used_memory"]


def queue_keys(client: redis.Redis, driver: Driver, queue: str) -> set[bytes]:
    prefix = driver.key_names.queue(PROJECT, queue)[:-1]
    return set(client.scan_iter(match=prefix.replace("[", "\\[") + "*", count=1000))


def queue_memory(client: redis.Redis, driver: Driver) -> dict[bytes, int]:
    """Bytes of every key of the queues q and dlq (MEMORY USAGE, counted exactly)."""
    keys = queue_keys(client, driver, "q") | queue_keys(client, driver, "dlq")
    return {key: client.memory_usage(key, samples=0) for key in keys}


# Memory


@pytest.mark.parametrize("state", ["free", "delayed", "claimed"])
def test_a_tiny_message_costs_at_most_250_bytes(own_server, state):
    client = redis.Redis(port=own_server.port)
    # The event trail has its own budget (test_the_event_trail_costs_...).
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(), events_settings=events.OFF))
    driver.queues.create(PROJECT, "q", {})
    post(driver, "q", 1)  # the queue's own state exists before the baseline
    driver.queues.purge(PROJECT, "q")
    before = used_memory(client)
    count = 20_000
    post(driver, "q", count, body={"n": 1}, delay=600 if state == "delayed" else 0)
    if state == "claimed":
        claimed = 0
        while claimed < count:
            claim = driver.claims.create(PROJECT, "q", ttl=600, grace=60, limit=1000,
                                 dead_letter=None)
            claimed += len(claim.messages)
    per_message = (used_memory(client) - before) / count
    driver.queues.delete(PROJECT, "q")
    driver.close()
    assert per_message <= MAX_BYTES_PER_MESSAGE, f"{per_message:.0f} bytes per message"


POLICY = {"_default_message_delay": 30, "_max_claim_count": 1, "_dead_letter_queue": "dlq"}


def busy_queue(driver: Broker, clock: FakeClock) -> None:
    """Messages in every state: free, delayed, claimed, dead-lettered, with claims."""
    driver.create_queue(PROJECT, "q", POLICY)

    def post_some(delay: int | None, n: int = 300) -> None:
        driver.post(PROJECT, "q", CLIENT, [PostedMessage({"n": i}, 120, delay)
                                          for i in range(n)], size=0)

    post_some(0)
    post_some(None)  # the queue's default delay
    post_some(0)
    claim = driver.claim(PROJECT, "q", ttl=60, grace=60, limit=20)
    driver.release_claim(PROJECT, "q", claim.id)
    driver.claim(PROJECT, "q", ttl=60, grace=60, limit=20)  # moves the released ones
    driver.claim(PROJECT, "q", ttl=60, grace=60, limit=20)


@pytest.mark.parametrize("ending", ["expiry", "deletion"])
def test_memory_returns_to_baseline_once_every_message_is_gone(own_server, ending):
    client = redis.Redis(port=own_server.port)
    clock = FakeClock()
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(), clock=clock,
                    events_settings=events.OFF))
    broker = Synchronous(Broker(driver.target, Limits()))
    for queue in ("q", "dlq"):
        driver.queues.create(PROJECT, queue, POLICY if queue == "q" else {})
        post(driver, queue, 1)  # the queue's counters exist before the baseline
        driver.claims.create(PROJECT, queue, ttl=60, grace=60, limit=1, dead_letter=None)
        driver.queues.purge(PROJECT, queue)
    baseline = queue_memory(client, driver)
    busy_queue(broker, clock)
    assert broker.stats(PROJECT, "dlq").total == 20
    assert sum(queue_memory(client, driver).values()) > sum(baseline.values()) + 100_000
    if ending == "expiry":
        clock.advance(3 * 3600)
        for queue in ("q", "dlq"):
            assert driver.reap_queue(PROJECT, queue)
    else:
        for queue in ("q", "dlq"):
            while messages := broker.list_messages(
                    PROJECT, queue, client_id=CLIENT, marker=None, limit=20, echo=True,
                    include_claimed=True, include_delayed=True)[0]:
                driver.messages.delete_many(PROJECT, queue, [m.id for m in messages])
        clock.advance(3 * 3600)  # claims outlive their messages until they expire
        for queue in ("q", "dlq"):
            assert driver.reap_queue(PROJECT, queue)
    after = queue_memory(client, driver)
    assert set(after) == set(baseline)
    # Only the queue's counters (message and claim numbers) have grown by a few digits.
    assert all(after[key] - baseline[key] <= 24 for key in after), (baseline, after)
    driver.close()


def test_the_reaper_empties_a_queue_nobody_touches(own_server):
    client = redis.Redis(port=own_server.port)
    clock = FakeClock()
    ns = namespace()
    driver = Synchronous(Driver(own_server.uri, namespace=ns, clock=clock,
                                events_settings=events.OFF))
    post(driver, "idle", 2000, ttl=60)
    assert len(queue_keys(client, driver, "idle")) > 5
    clock.advance(61)
    reaper = Synchronous(Driver(own_server.uri, namespace=ns, clock=clock, reap_interval=1,
                    events_settings=events.OFF))
    deadline = time.monotonic() + 20
    while len(queue_keys(client, driver, "idle")) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    reaper.close()
    assert queue_keys(client, driver, "idle") == {driver.key_names.queue(PROJECT, "idle").encode()}
    driver.close()


# Time, slots, scripts


def test_time_is_the_redis_servers_not_this_hosts(monkeypatch):
    uri = SERVERS.single().uri
    driver = Synchronous(Driver(uri, namespace=namespace()))
    server_seconds, micros = redis.Redis.from_url(uri).time()
    assert abs(driver.now() - (server_seconds + micros / 1e6)) < 1
    driver.queues.create(PROJECT, "q", {"_default_message_delay": 600})
    post(driver, "q", 1, delay=600)
    # This host's clock jumping an hour ahead changes nothing: scripts read TIME.
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert driver.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1, dead_letter=None) is None
    assert driver.queues.stats(PROJECT, "q").delayed == 1
    driver.close()


def test_listing_markers_are_decimal_and_the_old_base_36_ones_still_work():
    driver = Synchronous(Driver(SERVERS.single().uri, namespace=namespace()))
    broker = Synchronous(Broker(driver.target, Limits()))
    try:
        ids = post(driver, "q", 12)

        def listing(marker: str | None) -> tuple[list[str], str | None]:
            messages, next_marker = broker.list_messages(
                PROJECT, "q", client_id=CLIENT, marker=marker, limit=10, echo=True,
                include_claimed=True, include_delayed=True)
            return [m.id for m in messages], next_marker

        first, next_marker = listing(None)
        assert (first, next_marker) == (ids[:10], "10")
        assert listing(next_marker) == (ids[10:], "12")
        # Sequence names, as next links carried them before (a rolling upgrade still
        # hands them out): the tenth message's is 0000000a.
        assert listing("0000000a")[0] == ids[10:]
        assert listing(str(36 ** 8)) == ([], None)
    finally:
        driver.close()


def test_scripts_are_loaded_once_and_called_by_hash():
    uri = SERVERS.single().uri
    client = redis.Redis.from_url(uri)
    driver = Synchronous(Driver(uri, namespace=namespace()))
    scripts = driver._scripts._all
    assert all(client.script_exists(*[s.sha for s in scripts]))
    client.config_resetstat()
    post(driver, "q", 3)
    driver.claims.create(PROJECT, "q", ttl=60, grace=60, limit=2, dead_letter=None)
    stats = client.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] >= 2
    assert "cmdstat_eval" not in stats
    driver.close()


def test_every_key_of_a_queue_shares_one_cluster_slot():
    driver = Synchronous(Driver(SERVERS.cluster_uri(), namespace=namespace()))
    broker = Synchronous(Broker(driver.target, Limits()))
    busy_queue(broker, FakeClock())
    by_queue: dict[bytes, set[int]] = {}
    for node in driver._client.get_primaries():
        client = driver._client.get_redis_connection(node)
        for key in client.scan_iter(match=f"{driver.key_names.namespace}:*", count=1000):
            if b"}" in key:
                tag = key[key.index(b"{"):key.index(b"}") + 1]
                by_queue.setdefault(tag, set()).add(key_slot(key))
    assert len(by_queue) >= 3  # q, dlq and the project catalogue
    assert all(len(slots) == 1 for slots in by_queue.values()), by_queue
    driver.close()


# Dead-letter moves across slots, with a process killed between the steps


def cross_slot_names(driver: Driver) -> tuple[str, str]:
    source = "orders"
    for n in range(100):
        target = f"dead-{n}"
        if not driver.same_slot(driver.key_names.queue(PROJECT, source),
                                driver.key_names.queue(PROJECT, target)):
            return source, target
    raise AssertionError("no queue name in another slot")


def worn_out(broker: Broker, source: str, target: str, count: int) -> list[str]:
    """*count* messages the next claim of *source* must move to *target*."""
    broker.create_queue(PROJECT, source, {"_max_claim_count": 1,
                                          "_dead_letter_queue": target})
    ids = post(broker.driver, source, count)
    claim = broker.claim(PROJECT, source, ttl=60, grace=60, limit=count)
    broker.release_claim(PROJECT, source, claim.id)
    return ids


@pytest.mark.parametrize("kind", ["after-outbox", "after-move-in"])
def test_a_move_across_slots_survives_the_mover_dying_between_steps(kind):
    from tests.redis_crash import claim_and_die

    uri, ns = SERVERS.cluster_uri(), namespace()
    driver = Synchronous(Driver(uri, namespace=ns))
    broker = Synchronous(Broker(driver.target, Limits()))
    source, target = cross_slot_names(driver)
    ids = worn_out(broker, source, target, 5)

    child = SPAWN.Process(target=claim_and_die, args=(kind, uri, ns, PROJECT, source))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL

    outbox = driver.key_names.outbox(PROJECT, source)
    assert driver._client.hlen(outbox) == 5  # the crash left every move unfinished
    # Died after the first move-in: that message is in the dead-letter queue and still
    # in the outbox, the worst case for a repeat.
    moved_before = [m.id for m in driver.messages.get(PROJECT, target, ids)]
    assert len(moved_before) == (1 if kind == "after-move-in" else 0)

    # Any later operation on the source completes the moves, each exactly once.
    assert driver.messages.get(PROJECT, source, ids) == []
    assert driver._client.hlen(outbox) == 0
    in_target = [m.id for m in broker.list_messages(
        PROJECT, target, client_id=CLIENT, marker=None, limit=20, echo=True,
        include_claimed=True, include_delayed=True)[0]]
    assert Counter(in_target) == Counter(ids)
    assert {m.claim_count for m in driver.messages.get(PROJECT, target, ids)} == {1}
    assert broker.stats(PROJECT, target).total == 5
    assert target in [name for name, _ in broker.list_queues(PROJECT, None, 10)]
    driver.close()


def test_completing_the_same_moves_from_many_processes_applies_each_once():
    from tests.redis_crash import claim_and_die

    uri, ns = SERVERS.cluster_uri(), namespace()
    driver = Synchronous(Driver(uri, namespace=ns))
    broker = Synchronous(Broker(driver.target, Limits()))
    source, target = cross_slot_names(driver)
    ids = worn_out(broker, source, target, 20)
    child = SPAWN.Process(target=claim_and_die,
                          args=("after-outbox", uri, ns, PROJECT, source))
    child.start()
    child.join(timeout=60)

    completers = [SPAWN.Process(target=complete_moves, args=(uri, ns, source))
                  for _ in range(4)]
    for completer in completers:
        completer.start()
    for completer in completers:
        completer.join(timeout=60)
        assert completer.exitcode == 0
    assert broker.stats(PROJECT, target).total == 20
    assert sorted(m.id for m in driver.messages.get(PROJECT, target, ids)) == sorted(ids)
    driver.close()


def complete_moves(uri: str, ns: str, source: str) -> None:
    driver = Synchronous(Driver(uri, namespace=ns))
    driver.messages.get(PROJECT, source, ["x"])
    driver.close()


def test_a_driver_started_before_redis_works_once_redis_is_up(tmp_path):
    from delayq import errors
    from tests.redis_servers import RedisServer, free_ports

    [port] = free_ports(1)
    driver = Synchronous(Driver(f"redis://127.0.0.1:{port}/0", namespace=namespace(),
                    connect_timeout=0.2))
    with pytest.raises(errors.StorageUnavailable):
        driver.queues.get(PROJECT, "q")
    assert driver.ping() is False
    server = RedisServer(port, tmp_path / "late")
    server.start()
    try:
        # Attempts to connect are spaced out (CONNECT_PAUSE): the next one succeeds.
        deadline = time.monotonic() + 5
        while not driver.ping() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert driver.ping() is True
        post(driver, "q", 2)
        assert driver.queues.stats(PROJECT, "q").free == 2
    finally:
        driver.close()
        server.stop()


def crashed_moves(kind: str, count: int) -> tuple[str, str, Driver, Broker, str, str, list]:
    """A cluster source queue whose claimer died mid-moves, and its dead-letter queue."""
    from tests.redis_crash import claim_and_die

    uri, ns = SERVERS.cluster_uri(), namespace()
    driver = Synchronous(Driver(uri, namespace=ns))
    broker = Synchronous(Broker(driver.target, Limits()))
    source, target = cross_slot_names(driver)
    ids = worn_out(broker, source, target, count)
    child = SPAWN.Process(target=claim_and_die, args=(kind, uri, ns, PROJECT, source))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    return uri, ns, driver, broker, source, target, ids


def test_purging_the_source_completes_moves_that_arrive_during_the_purge():
    from tests.redis_crash import CompletesMovesLate

    uri, ns, driver, broker, source, target, ids = crashed_moves("after-outbox", 3)
    late = Synchronous(CompletesMovesLate(uri, namespace=ns))
    late.queues.purge(PROJECT, source)
    assert late.skipped
    assert sorted(m.id for m in driver.messages.get(PROJECT, target, ids)) == sorted(ids)
    assert driver._client.hlen(driver.key_names.outbox(PROJECT, source)) == 0
    late.close()
    driver.close()


def test_a_move_repeated_after_the_dead_letter_queue_was_purged_is_not_applied_again():
    uri, ns, driver, broker, source, target, ids = crashed_moves("after-move-in", 2)
    [arrived] = driver.messages.get(PROJECT, target, ids)
    driver.queues.purge(PROJECT, target)
    driver.messages.get(PROJECT, source, ids)  # completes the pending moves
    assert {m.id for m in driver.messages.get(PROJECT, target, ids)} == set(ids) - {arrived.id}
    driver.close()


@pytest.mark.parametrize("uri", ["http://127.0.0.1:1", "redis://:secret@h:port",
                                 "redis://a:1,b:2/3"])
def test_a_malformed_uri_stops_the_driver_without_repeating_the_password(uri):
    with pytest.raises(ValueError) as raised:
        Synchronous(Driver(uri))
    assert "secret" not in str(raised.value)


def test_a_queue_whose_slot_is_migrating_answers_unavailable_not_an_error():
    from delayq import errors

    driver = Synchronous(Driver(SERVERS.cluster_uri(), namespace=namespace()))
    post(driver, "moving", 1)
    key = driver.key_names.queue(PROJECT, "moving")
    slot = key_slot(key.encode())
    cluster = driver._client
    owner = cluster.nodes_manager.get_node_from_slot(slot)
    other = next(n for n in cluster.get_primaries() if n.name != owner.name)
    owner_client = cluster.get_redis_connection(owner)
    other_id = cluster.get_redis_connection(other).execute_command("CLUSTER MYID")
    owner_client.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", other_id)
    try:
        with pytest.raises(errors.StorageUnavailable, match="migrated"):
            # A claim reaches keys of the slot that do not exist yet (the claim
            # record): during a migration Redis refuses that with ASK or TRYAGAIN.
            for _ in range(3):
                driver.claims.create(PROJECT, "moving", ttl=60, grace=60, limit=1,
                             dead_letter=None)
                post(driver, "moving", 1)
    finally:
        owner_client.execute_command("CLUSTER SETSLOT", slot, "STABLE")
    assert driver.queues.stats(PROJECT, "moving").total >= 1
    driver.close()


# The event trail

MAX_BYTES_PER_EVENT = 100


def test_the_event_trail_costs_at_most_100_bytes_an_event(own_server):
    client = redis.Redis(port=own_server.port)
    with_trail = Synchronous(Driver(own_server.uri, namespace=namespace()))
    without = Synchronous(Driver(own_server.uri, namespace=namespace(), events_settings=events.OFF))
    spent = {}
    for driver in (with_trail, without):
        post(driver, "q", 1)
        driver.queues.purge(PROJECT, "q")
        before = used_memory(client)
        post(driver, "q", 20_000, body={"n": 1})  # one posted event each
        spent[driver] = used_memory(client) - before
    per_event = (spent[with_trail] - spent[without]) / 20_000
    assert 0 < per_event <= MAX_BYTES_PER_EVENT, f"{per_event:.0f} bytes per event"


def test_the_trail_outlives_its_queue_and_then_goes_with_its_retention(own_server):
    client = redis.Redis(port=own_server.port)
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(),
                    events_settings=events.Settings(retention=1)))
    post(driver, "q", 3)
    driver.queues.delete(PROJECT, "q")
    key = driver.key_names.trail(PROJECT, "q")
    assert [e.kind for e in driver.trail.events(PROJECT, "q")] == ["posted"] * 3 + ["purged"]
    assert (PROJECT, "q") in driver.trail.queues(PROJECT)
    assert 0 < client.pttl(key) <= 1000
    time.sleep(1.2)
    assert not client.exists(key)
    assert list(driver.trail.events(PROJECT, "q")) == []


def test_old_events_are_trimmed_as_new_ones_arrive(own_server):
    client = redis.Redis(port=own_server.port)
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(),
                    events_settings=events.Settings(retention=1)))
    post(driver, "q", 1000)  # ten stream nodes of 100 entries: MINID ~ trims whole nodes
    time.sleep(1.1)
    post(driver, "q", 1)
    assert client.xlen(driver.key_names.trail(PROJECT, "q")) <= 101


def test_no_trail_is_written_when_it_is_off(own_server):
    client = redis.Redis(port=own_server.port)
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(), events_settings=events.OFF))
    post(driver, "q", 5)
    driver.claims.create(PROJECT, "q", ttl=60, grace=60, limit=5, dead_letter=None)
    driver.queues.purge(PROJECT, "q")
    assert not client.exists(driver.key_names.trail(PROJECT, "q"))
    assert list(driver.trail.events(PROJECT, "q")) == []


def test_read_messages_gives_live_claim_expiries():
    clock = FakeClock()
    driver = Synchronous(Driver(SERVERS.single().uri, namespace=namespace(), clock=clock))
    post(driver, "q", 2)
    claim = driver.claims.create(PROJECT, "q", ttl=100, grace=60, limit=1, dead_letter=None)
    read = list(driver.trail.messages(PROJECT, "q"))
    assert [m.id for m in read] == [m.id for m in driver.messages.get(
        PROJECT, "q", [m.id for m in read])]
    assert read[0].claim_id == claim.id and read[0].claim_expires == claim.expires
    assert read[1].claim_id is None
    clock.advance(4000)
    assert list(driver.trail.messages(PROJECT, "q")) == []


def sent_commands(port: int, action) -> list[str]:
    """The commands clients sent Redis while *action* ran (by MONITOR: what the server
    received, not what any client library says it sent), script-internal ones left out."""
    end = f"end-{uuid.uuid4().hex}"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as monitor:
        monitor.sendall(b"MONITOR\r\n")
        received = b""
        while b"\r\n" not in received:
            received += monitor.recv(4096)
        assert received.startswith(b"+OK"), received
        received = received.split(b"\r\n", 1)[1]
        action()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as marker:
            marker.sendall(f"ECHO {end}\r\n".encode())
            marker.recv(4096)
        while end.encode() not in received:
            received += monitor.recv(65536)
    lines = [line.decode() for line in received.split(b"\r\n") if line]
    # A line: +<time> [<db> <client address or "lua">] "<COMMAND>" "<arg>" ...
    return [line.split('"')[1].upper() for line in lines
            if " lua]" not in line and end not in line]


def test_script_calls_survive_a_restart_and_a_flushed_script_cache():
    server = SERVERS.fresh()
    driver = Synchronous(Driver(server.uri, namespace=namespace()))
    try:
        ids = post(driver, "q", 1)
        server.stop()  # no persistence: the data and the loaded scripts are gone
        server.start()
        # The connection that served a call before is dead: the call is sent again once
        # on a new one, and finds its script unknown, loads it and runs.
        again = post(driver, "q", 1)
        redis.Redis(port=server.port).script_flush()
        again += post(driver, "q", 1)
        assert [m.id for m in driver.messages.get(PROJECT, "q", ids + again)] == again
    finally:
        driver.close()
        server.stop()


def test_a_script_call_that_timed_out_is_not_sent_again():
    server = SERVERS.fresh()
    driver = Synchronous(Driver(server.uri, namespace=namespace(), socket_timeout=0.5))
    observer = redis.Redis(port=server.port)
    try:
        post(driver, "q", 1)
        observer.client_pause(800)  # every client's command waits 0.8 s, then runs
        # Sent again after its 0.5 s timeout, the post would run when the pause ends.
        with pytest.raises(errors.StorageUnavailable):
            post(driver, "q", 1)
        time.sleep(1.0)
        # The post timed out on a connection closed since: Redis dropped it unrun.
        assert driver.queues.stats(PROJECT, "q").total == 1
    finally:
        observer.close()
        driver.close()
        server.stop()


@pytest.mark.parametrize("quotas", [Quotas(), Quotas(max_queues_per_project=10,
                                                     max_messages_per_queue=100)])
def test_a_post_or_claim_under_known_metadata_is_one_round_trip(own_server, quotas):
    driver = Synchronous(Driver(own_server.uri, namespace=namespace()))
    broker = Synchronous(Broker(driver.target, Limits(), quotas=quotas))
    broker.create_queue("p", "q", {})
    one = [PostedMessage(body="x", ttl=60, delay=None)]
    broker.post("p", "q", "client", one, 10)  # reads the metadata once
    taken = []

    def post_and_claim() -> None:
        broker.post("p", "q", "client", one, 10)
        taken.append(broker.claim("p", "q", ttl=60, grace=60, limit=2))

    assert sent_commands(own_server.port, post_and_claim) == ["EVALSHA", "EVALSHA"]
    assert len(taken[0].messages) == 2
    driver.close()


def test_a_post_over_its_quota_reaps_expired_messages_before_it_refuses(own_server):
    """Expired messages stay in the sorted sets until reaped: a post that counts its
    queue over the quota reaps them, over as many calls as that takes, and counts only
    the live ones."""
    clock = FakeClock()
    driver = Synchronous(Driver(own_server.uri, namespace=namespace(), clock=clock))
    post(driver, "q", 5000, ttl=60)  # 79 buckets: more than one call reaps
    clock.advance(61)
    post(driver, "q", 3)
    three = [NewMessage("x", 60, 0)] * 3
    with pytest.raises(errors.QuotaExceeded, match="holds 3 messages; 3 more"):
        driver.messages.post(PROJECT, "q", CLIENT, three, message_quota=5)
    assert len(driver.messages.post(PROJECT, "q", CLIENT, three[:2], message_quota=5)) == 2
    assert driver.queues.stats(PROJECT, "q").total == 5
    driver.close()


def test_metadata_changed_by_another_process_rules_the_next_post_and_claim(own_server):
    """Process A decided its writes from metadata it had read; process B changes it: A's
    next post takes the new delay, and its next claim the new dead-letter policy."""
    shared = namespace()
    a = Synchronous(Broker(Driver(own_server.uri, namespace=shared), Limits()))
    b = Synchronous(Broker(Driver(own_server.uri, namespace=shared), Limits()))
    a.create_queue("p", "q", {})
    first, = a.post("p", "q", "client", [PostedMessage(body="before", ttl=None, delay=None)], 10)
    b.patch_queue("p", "q", [{"op": "add", "path": "/metadata/_default_message_delay",
                              "value": 600}])
    second, = a.post("p", "q", "client", [PostedMessage(body="after", ttl=None, delay=None)], 10)
    stored = {m.id: m for m in a.driver.messages.get("p", "q", [first, second])}
    assert stored[first].due == stored[first].created
    assert stored[second].due == pytest.approx(stored[second].created + 600)
    claim = a.claim("p", "q", ttl=60, grace=60, limit=10)
    assert [m.id for m in claim.messages] == [first]  # the second is delayed now

    b.patch_queue("p", "q", [
        {"op": "add", "path": "/metadata/_max_claim_count", "value": 1},
        {"op": "add", "path": "/metadata/_dead_letter_queue", "value": "dlq"}])
    a.release_claim("p", "q", claim.id)
    assert a.claim("p", "q", ttl=60, grace=60, limit=10) is None  # moved instead
    stats = b.stats("p", "dlq")
    assert (stats.free, stats.claimed, stats.delayed) == (1, 0, 0)
    a.driver.close()
    b.driver.close()


def test_a_reply_larger_than_the_links_read_buffer_arrives_whole(own_server):
    # The script link reads replies READ_SIZE bytes at a time: a claim of bodies adding
    # up to several times that must come back whole, and the next call must not see
    # any of it.
    driver = Synchronous(Driver(own_server.uri, namespace=namespace()))
    try:
        bodies = [{"n": i, "text": f"{i:05d}" * 8000} for i in range(10)]  # 40 KB each
        ids = []
        for body in bodies:
            ids += post(driver, "big", 1, body=body)
        claim = driver.claims.create(PROJECT, "big", ttl=60, grace=60, limit=10, dead_letter=None)
        assert [m.body for m in claim.messages] == bodies
        assert [m.id for m in claim.messages] == ids
        assert driver.queues.stats(PROJECT, "big").total == 10
    finally:
        driver.close()


def test_forked_workers_mint_different_nonces():
    # Nonces come from the random module, which reseeds in a forked child: gunicorn's
    # workers, forked from one master, must not mint the same queue incarnations.
    from delayq.storage.redis.layout import new_nonce

    new_nonce()  # the parent's generator in use before the fork, as in the master
    read, write = os.pipe()
    children = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:  # the child writes one nonce and leaves at once
            os.write(write, (new_nonce() + "\n").encode())
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    os.close(write)
    with os.fdopen(read) as lines:
        nonces = lines.read().split()
    assert len(nonces) == 4 and len(set(nonces + [new_nonce()])) == 5, nonces


def without_token(client: redis.Redis, key: str, field: str | int) -> None:
    """Rewrite a record as the scripts stored it before ids had tokens: without its
    fifth field, the token (strings packed as MessagePack raw strings, as Lua does)."""
    fields = msgpack.unpackb(client.hget(key, field), raw=True)
    del fields[4]
    client.hset(key, field, msgpack.packb(fields, use_bin_type=False))


def test_messages_and_claims_stored_before_ids_had_tokens_keep_their_ids():
    client = redis.Redis.from_url(SERVERS.single().uri)
    driver = Synchronous(Driver(SERVERS.single().uri, namespace=namespace()))
    try:
        fresh, stored = post(driver, "q", 2)
        prefix = driver.key_names.queue(PROJECT, "q")[:-1]
        nonce = client.hget(prefix + "s", "nonce").decode()
        seq = stored[len(nonce):len(nonce) + 8]
        without_token(client, f"{prefix}b:{int(seq, 36) // 64}", seq)
        old = nonce + seq
        assert [m.id for m in driver.messages.get(PROJECT, "q", [stored, old])] == [old]
        assert [m.id for m in driver.messages.page(
            PROJECT, "q", marker=LISTING_START, limit=10, exclude_client=None,
            include_claimed=False, include_delayed=False)[0]] == [fresh, old]

        taken = driver.claims.create(PROJECT, "q", ttl=60, grace=60, limit=2, dead_letter=None)
        number = int(taken.id[len(nonce) + 1:len(nonce) + 9], 36)
        without_token(client, prefix + "cl", number)
        old_claim = f"{nonce}c{number}"
        with pytest.raises(errors.ClaimNotFound):
            driver.claims.get(PROJECT, "q", taken.id)
        held = driver.claims.get(PROJECT, "q", old_claim).messages
        assert [(m.id, m.claim_id) for m in held] == [(fresh, old_claim), (old, old_claim)]
        driver.claims.renew(PROJECT, "q", old_claim, 120, 60)
        driver.messages.delete(PROJECT, "q", old, old_claim)
        assert [m.id for m in driver.messages.get(PROJECT, "q", [fresh, old])] == [fresh]
    finally:
        driver.close()
