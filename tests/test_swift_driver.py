"""What only the Swift driver promises, beyond the shared contract suite, on a real Swift.

Generation markers won by bidding (exactly one winner, and why the settle time matters),
every step of a claim or a dead-letter move surviving a process killed right after it,
X-Delete-At on every object and expiry by the driver's clock, Swift requests per operation
that do not grow with the messages a queue holds, the proxy's clock, 503 when Swift is
unreachable or refuses the credentials, and the driver built from the configuration.

The Swift is tests/swift_server.py's, each test under a container prefix of its own.
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from falcon import testing
from swiftclient.client import Connection
from swiftclient.exceptions import ClientException

from delayq import conf as delayq_conf
from delayq import errors, events
from delayq.api.app import create_app
from delayq.broker import Broker
from delayq.message import LISTING_START, NewMessage
from delayq.queue import QueueCounts
from delayq.storage.registry import load_driver
from delayq.storage.swift import layout
from delayq.storage.swift.driver import Driver
from delayq.synchronous import Synchronous
from delayq.validation import Limits, message_edit
from tests.contract.drivers import FakeClock
from tests.server import free_port
from tests.swift_fixtures import connector
from tests.swift_server import SWIFT
from tests.trail_history import replayed_trail, sqlite_trail

pytestmark = pytest.mark.timeout(120)

SPAWN = multiprocessing.get_context("spawn")
PROJECT = "p"
CLIENT = "6f1c2a4e-9a0b-4c55-8f7e-2d1b3c4d5e6f"
# A start with a fraction of a second, to see X-Delete-At rounded up.
START = 4_000_000_000.25
POLICY = {"_max_claim_count": 1, "_dead_letter_queue": "dlq"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def post(driver: Driver, queue: str, count: int, *, ttl: int = 3600, delay: int = 0
         ) -> list[str]:
    return driver.messages.post(PROJECT, queue, CLIENT,
                                [NewMessage({"n": i}, ttl, delay) for i in range(count)])


def names(raw: Connection, prefix: str, queue: str, start: str = "") -> list[str]:
    """The object names Swift lists in *queue*'s container (beginning with *start*)."""
    _, listing = raw.get_container(layout.container(prefix, PROJECT, queue), prefix=start,
                                   full_listing=True)
    return [item["name"] for item in listing]


def listed(broker: Broker, queue: str) -> list[str]:
    messages, _ = broker.list_messages(PROJECT, queue, client_id=CLIENT, marker=None,
                                       limit=20, echo=True, include_claimed=True,
                                       include_delayed=True)
    return [m.id for m in messages]


# Bidding


def race(driver: Driver, container: str, marker: str, racers: int,
         stagger: float = 0.0) -> int:
    """*racers* threads bid for *marker* at once (racer i *stagger* × i later); winners."""
    wins: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(racers)

    def bid(i: int) -> None:
        driver._objects.swift.get_auth()  # log in before the start, not during the race
        start.wait()
        time.sleep(stagger * i)
        won = driver._objects.bid(container, marker, {"kind": "claim", "racer": i}, {})
        with lock:
            wins.append(won)

    threads = [threading.Thread(target=bid, args=(i,)) for i in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(wins) == racers
    return sum(wins)


def test_of_twelve_bidders_for_one_marker_exactly_one_wins_every_round(make_driver, prefix,
                                                                      clock):
    driver = make_driver(clock=clock, claim_settle_time=0.1)
    driver.queues.create(PROJECT, "q", {})
    container = layout.container(prefix, PROJECT, "q")
    winners = [race(driver, container, f"c/bid{n}/000001", 12) for n in range(10)]
    assert winners == [1] * 10


class SlowUploads:
    """A connection whose object PUTs send their body *delay* seconds late, as a slow
    network or a paused proxy would: the object server checks ``If-None-Match`` when the
    request arrives and stores the object when the body is in."""

    def __init__(self, conn: Connection, delay: float) -> None:
        self._conn = conn
        self._delay = delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def put_object(self, container: str, obj: str, contents: bytes, *args: Any,
                   **kwargs: Any) -> Any:
        def late() -> Iterator[bytes]:
            time.sleep(self._delay)
            yield contents

        return self._conn.put_object(container, obj, late(), *args, **kwargs)


@pytest.mark.parametrize("settle", [0.0, 0.6])
def test_the_settle_time_is_what_keeps_late_landing_racers_from_winning_too(make_driver,
                                                                            prefix, clock,
                                                                            settle):
    # Four racers 0.1 s apart, each sending its body 0.5 s late: every racer passes the
    # object server's existence check before the first one's object is stored (0.5 s),
    # and each stores its own 0.1 s after the one before. Reading back at once (settle 0),
    # several see their own nonce; reading back after the last one landed (settle 0.6 s),
    # only the last one does.
    driver = make_driver(clock=clock, claim_settle_time=settle,
                         wrap=lambda conn: SlowUploads(conn, 0.5))
    driver.queues.create(PROJECT, "q", {})
    container = layout.container(prefix, PROJECT, "q")
    winners = [race(driver, container, f"c/late{n}/000001", 4, stagger=0.1)
               for n in range(2)]
    if settle == 0:
        assert min(winners) >= 2, winners
    else:
        assert winners == [1, 1]


# A process killed at every step of a claim or a move


def crash(kind: str, prefix: str, queue: str, now: float, *, redrive: bool = False,
          edit: tuple[str, dict[str, Any]] | None = None) -> None:
    """Run a claim (a redrive, or the *edit* ``(message id, document)``) in a child
    process whose driver dies at step *kind*."""
    from tests.swift_crash import claim_and_die, edit_and_die, redrive_and_die

    auth = SWIFT.auth()
    target = edit_and_die if edit else redrive_and_die if redrive else claim_and_die
    child = SPAWN.Process(target=target, args=(
        kind, (auth.auth_url, auth.user, auth.key), prefix, PROJECT, queue, now,
        *(edit or ())))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL


@pytest.mark.parametrize(("kind", "first_look"), [
    ("after-claim-bid", "after-settle"), ("after-claim-bid", "after-expiry"),
    ("after-claim-record", "after-settle"), ("after-claim-entry", "after-settle")])
def test_a_claimer_killed_mid_claim_holds_the_message_until_its_claim_expires(
        make_driver, prefix, clock, kind, first_look):
    driver = make_driver(clock=clock)
    broker = Synchronous(Broker(driver.target, Limits()))
    ids = post(driver, "q", 3)
    crash(kind, prefix, "q", clock.now)  # claimed ids[0] for 60 s, then died

    # While its bid could still be settling, the dead claimer's message is left alone.
    alive = broker.claim(PROJECT, "q", ttl=300, grace=60, limit=10)
    assert [m.id for m in alive.messages] == ids[1:]

    if first_look == "after-settle":
        clock.advance(1)
        # The stale index entry is repaired: the dead claimer's claim stands, and counts.
        assert broker.claim(PROJECT, "q", ttl=300, grace=60, limit=10) is None
        stats = broker.stats(PROJECT, "q")
        assert (stats.free, stats.claimed, stats.delayed) == (0, 3, 0)
        [held] = driver.messages.get(PROJECT, "q", [ids[0]])
        assert held.claim_count == 1
        assert held.claim_id not in (None, alive.id)
        assert held.claim_expires == pytest.approx(START + 60)
        clock.advance(60)
    else:
        clock.advance(61)

    # Once the dead claimer's claim has expired, the next claim gets the message.
    later = broker.claim(PROJECT, "q", ttl=300, grace=60, limit=10)
    assert [(m.id, m.claim_count) for m in later.messages] == [(ids[0], 2)]
    assert broker.claim(PROJECT, "q", ttl=300, grace=60, limit=10) is None
    stats = broker.stats(PROJECT, "q")
    assert (stats.free, stats.claimed, stats.delayed) == (0, 3, 0)
    for claim in (alive, later):
        for message in claim.messages:
            broker.delete_message(PROJECT, "q", message.id, claim.id)
    assert broker.stats(PROJECT, "q").total == 0


MOVE_STEPS = ["after-move-bid", "after-moving-mark", "after-copy", "before-source-delete"]


def claimed_once(driver: Driver, broker: Broker) -> list[str]:
    """Three messages in "q" (policy: one claim, then "dlq") that the next claim moves."""
    broker.create_queue(PROJECT, "q", POLICY)
    ids = post(driver, "q", 3)
    claim = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=3)
    broker.release_claim(PROJECT, "q", claim.id)
    return ids


@pytest.mark.parametrize("completer", ["reader", "claimer"])
@pytest.mark.parametrize("kind", MOVE_STEPS)
def test_a_mover_killed_between_steps_leaves_each_message_in_exactly_one_queue(
        make_driver, prefix, clock, raw, kind, completer):
    driver = make_driver(clock=clock)
    broker = Synchronous(Broker(driver.target, Limits()))
    ids = claimed_once(driver, broker)
    crash(kind, prefix, "q", clock.now)  # died moving ids[0]

    copied = kind in ("after-copy", "before-source-delete")
    in_dlq = [m.id for m in driver.messages.get(PROJECT, "dlq", ids)]
    assert in_dlq == ([ids[0]] if copied else [])

    if completer == "reader":
        # Reading the source completes a move under way and does not report the message;
        # a message whose mover died before marking it is still only in the source.
        in_source = [m.id for m in driver.messages.get(PROJECT, "q", ids)]
        assert in_source == (ids if kind == "after-move-bid" else ids[1:])
    else:
        # A claim meeting the stale index entry completes the move (and makes the rest).
        clock.advance(1)
        assert broker.claim(PROJECT, "q", ttl=60, grace=60, limit=10) is None

    for view in (lambda q: [m.id for m in driver.messages.get(PROJECT, q, ids)],
                 lambda q: listed(broker, q)):
        seen = Counter(view("q")) + Counter(view("dlq"))
        assert seen == Counter(ids), seen

    clock.advance(1)
    assert broker.claim(PROJECT, "q", ttl=60, grace=60, limit=10) is None
    assert listed(broker, "q") == []
    assert Counter(listed(broker, "dlq")) == Counter(ids)
    moved = driver.messages.get(PROJECT, "dlq", ids)
    assert [(m.id, m.claim_count, m.source_queue) for m in moved] == [
        (i, 1, "q") for i in ids]
    assert broker.stats(PROJECT, "q").total == 0
    assert broker.stats(PROJECT, "dlq").free == 3
    # Nothing left behind in the source, nothing twice in the dead-letter queue.
    assert [n for n in names(raw, prefix, "q") if n.startswith(("m/", "a/"))] == []
    assert len(names(raw, prefix, "dlq", "m/")) == len(names(raw, prefix, "dlq", "a/")) == 3
    again = broker.claim(PROJECT, "dlq", ttl=60, grace=60, limit=10)
    assert sorted((m.id, m.claim_count) for m in again.messages) == [(i, 2) for i in ids]



@pytest.mark.parametrize("completer", ["reader", "redrive"])
@pytest.mark.parametrize("kind", MOVE_STEPS)
def test_a_redrive_killed_between_steps_leaves_each_message_in_exactly_one_queue(
        make_driver, prefix, clock, raw, kind, completer):
    driver = make_driver(clock=clock)
    broker = Synchronous(Broker(driver.target, Limits()))
    ids = claimed_once(driver, broker)
    clock.advance(1)
    assert broker.claim(PROJECT, "q", ttl=60, grace=60, limit=3) is None  # all moved
    clock.advance(1)
    crash(kind, prefix, "dlq", clock.now, redrive=True)  # died redriving one of them

    if completer == "reader":
        # Reading the dead-letter queue completes a redrive under way.
        in_dlq = [m.id for m in driver.messages.get(PROJECT, "dlq", ids)]
        assert len(in_dlq) == (3 if kind == "after-move-bid" else 2)
    clock.advance(1)
    # The dead redrive's message is completed on the way (its won marker says where it
    # goes), not counted again.
    assert broker.redrive(PROJECT, "dlq") == 2
    for view in (lambda q: [m.id for m in driver.messages.get(PROJECT, q, ids)],
                 lambda q: listed(broker, q)):
        assert Counter(view("q")) + Counter(view("dlq")) == Counter(ids)
    assert listed(broker, "dlq") == []
    back = driver.messages.get(PROJECT, "q", ids)
    assert sorted((m.id, m.claim_count, m.source_queue) for m in back) == [
        (i, 0, None) for i in sorted(ids)]
    assert [n for n in names(raw, prefix, "dlq") if n.startswith(("m/", "a/"))] == []
    assert len(names(raw, prefix, "q", "m/")) == len(names(raw, prefix, "q", "a/")) == 3
    again = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=10)
    assert sorted((m.id, m.claim_count) for m in again.messages) == [
        (i, 1) for i in sorted(ids)]


# An editor killed mid-edit

EDIT_STEPS = ["after-edit-bid", "after-edit-write"]


@pytest.mark.parametrize("completer", ["claimer", "editor"])
@pytest.mark.parametrize("change", ["body", "delay"])
@pytest.mark.parametrize("kind", EDIT_STEPS)
def test_an_editor_killed_mid_edit_leaves_the_message_once_and_edited_at_most_once(
        make_driver, prefix, clock, raw, kind, change, completer):
    driver = make_driver(clock=clock)
    broker = Synchronous(Broker(driver.target, Limits()))
    broker.create_queue(PROJECT, "q", {"_default_message_delay": 600})
    ids = post(driver, "q", 3)
    document = {"body": "edited"} if change == "body" else {"delay": 300}
    crash(kind, prefix, "q", clock.now, edit=(ids[0], document))

    # Never lost, never twice, whatever a reader meets.
    assert sorted(m.id for m in driver.messages.get(PROJECT, "q", ids)) == sorted(ids)
    assert sorted(listed(broker, "q")) == sorted(ids)
    clock.advance(1)  # the dead editor's bid has settled
    if completer == "editor":
        # The next edit completes the dead one, then makes its own on top.
        edited = broker.edit_message(PROJECT, "q", ids[0],
                                     message_edit({"body": "again"}, Limits()))
        assert edited.body == "again"
        assert edited.is_delayed == (change == "delay")
    # A claim meets the stale entry and completes the edit; an edit is not a claim.
    first = broker.claim(PROJECT, "q", ttl=900, grace=60, limit=10)
    claimed = [m.id for m in first.messages]
    if change == "delay":
        assert sorted(claimed) == sorted(ids[1:])
        clock.advance(300)
        [late] = broker.claim(PROJECT, "q", ttl=900, grace=60, limit=10).messages
    else:
        # The repaired entry may come too late for the claim that repaired it.
        rest = [] if ids[0] in claimed else broker.claim(
            PROJECT, "q", ttl=900, grace=60, limit=10).messages
        [late] = [m for m in [*first.messages, *rest] if m.id == ids[0]]
    expected = "again" if completer == "editor" else (
        "edited" if change == "body" else {"n": 0})
    assert (late.id, late.body, late.claim_count) == (ids[0], expected, 1)
    assert broker.claim(PROJECT, "q", ttl=900, grace=60, limit=10) is None
    assert broker.stats(PROJECT, "q").claimed == 3
    assert len(names(raw, prefix, "q", "m/")) == len(names(raw, prefix, "q", "a/")) == 3


# A claim racing a delete


class Hold:
    """Wraps connections so that the first request of each *rule* — a method and the
    start of an object name — waits until the test releases it."""

    def __init__(self, *rules: tuple[str, str]) -> None:
        self._arrived = {rule: threading.Event() for rule in rules}
        self._released = {rule: threading.Event() for rule in rules}
        self._lock = threading.Lock()

    def wrap(self, conn: Connection) -> Any:
        hold = self

        class Held:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(conn, name)

                def call(container: str, obj: str, *args: Any, **kwargs: Any) -> Any:
                    hold._wait((name, obj))
                    return attr(container, obj, *args, **kwargs)

                return call if name in {method for method, _ in hold._arrived} else attr

        return Held()

    def _wait(self, request: tuple[str, str]) -> None:
        for rule in self._arrived:
            method, start = rule
            if request[0] == method and request[1].startswith(start):
                with self._lock:
                    first = not self._arrived[rule].is_set()
                    self._arrived[rule].set()
                if first:
                    assert self._released[rule].wait(30), f"{rule} never released"

    def reached(self, method: str, start: str) -> None:
        assert self._arrived[method, start].wait(30), f"no {method} of {start}* came"

    def release(self, method: str, start: str) -> None:
        self._released[method, start].set()


class Background(threading.Thread):
    def __init__(self, work: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._work = work
        self._outcome: tuple[bool, Any] | None = None

    def run(self) -> None:
        try:
            self._outcome = (True, self._work())
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self._outcome = (False, exc)

    def result(self) -> Any:
        self.join(timeout=60)
        assert self._outcome is not None, "still running"
        ok, value = self._outcome
        if not ok:
            raise value
        return value


def test_a_loser_repairing_the_index_while_the_winner_deletes_leaves_nothing_behind(
        make_driver, raw, prefix):
    winner = make_driver(clock=FakeClock(START))
    hold = Hold(("put_object", "c/"), ("put_object", "a/"))
    loser = make_driver(clock=FakeClock(START + 1), wrap=hold.wrap)
    [message_id] = post(winner, "q", 1)
    late = Background(lambda: loser.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1,
                                          dead_letter=None))
    late.start()
    hold.reached("put_object", "c/")  # the loser has listed the message, is about to bid
    claim = winner.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1, dead_letter=None)
    assert [m.id for m in claim.messages] == [message_id]
    hold.release("put_object", "c/")
    hold.reached("put_object", "a/")  # lost; repairing the index from what it read
    winner.messages.delete(PROJECT, "q", message_id, claim.id)
    hold.release("put_object", "a/")
    assert late.result() is None
    assert winner.queues.stats(PROJECT, "q").total == 0
    assert names(raw, prefix, "q", "a/") == []


def test_a_claim_of_a_message_deleted_while_it_was_claiming_leaves_nothing_behind(
        make_driver, raw, prefix, clock):
    hold = Hold(("post_object", "m/"))
    claimer = make_driver(clock=clock, wrap=hold.wrap)
    deleter = make_driver(clock=clock)
    [message_id] = post(deleter, "q", 1)
    claiming = Background(lambda: claimer.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1,
                                                dead_letter=None))
    claiming.start()
    hold.reached("post_object", "m/")  # won the message, about to write its claimed state
    deleter.messages.delete(PROJECT, "q", message_id, None)  # not claimed yet: deleted
    hold.release("post_object", "m/")
    claim = claiming.result()
    for message in claim.messages if claim else []:
        claimer.messages.delete(PROJECT, "q", message.id, claim.id)
    assert deleter.queues.stats(PROJECT, "q").total == 0
    assert names(raw, prefix, "q", "a/") == []


# A read racing a rewrite of the message


def test_a_message_whose_state_is_being_rewritten_is_never_read_as_gone(make_driver, raw,
                                                                         prefix):
    """Swift answers 404 to about one read in a hundred that races a POST of the object
    (tests/swift_server.py); taken for "deleted", that lost claimed messages."""
    driver = make_driver()
    [message_id] = post(driver, "q", 1)
    container = layout.container(prefix, PROJECT, "q")
    name = layout.message_name(message_id)
    state = {key: value for key, value in raw.head_object(container, name).items()
             if key.startswith("x-object-meta-") or key == "x-delete-at"}
    stop = time.monotonic() + 8
    reads = misses = 0

    def rewrite() -> None:
        # What another API process does to a message it claims or renews.
        conn = Connection(raw.authurl, raw.user, raw.key, retries=0)
        while time.monotonic() < stop:
            try:
                conn.post_object(container, name, headers=state)
            except ClientException as exc:
                # 409: a racing POST landed first; 404: this POST raced one, too.
                if exc.http_status not in (404, 409):
                    raise
        conn.close()

    writers = [Background(rewrite) for _ in range(2)]
    for writer in writers:
        writer.start()
    while time.monotonic() < stop:
        reads += 1
        misses += driver.messages.get(PROJECT, "q", [message_id]) == []
    for writer in writers:
        writer.result()
    assert reads > 100
    assert misses == 0


# Expiry


def delete_at(raw: Connection, prefix: str, queue: str, name: str) -> int:
    return int(raw.head_object(layout.container(prefix, PROJECT, queue), name)["x-delete-at"])


def objects_of(raw: Connection, prefix: str, queue: str, message_id: str) -> dict[str, str]:
    """The message's own object, index entry and generation markers, by kind."""
    found = {}
    for name in names(raw, prefix, queue):
        if message_id in name:
            found.setdefault(name[:2], []).append(name)
    return {kind: max(group) for kind, group in found.items()}


RETENTION = 600  # expired_retention of the X-Delete-At test


def test_every_object_carries_x_delete_at_at_its_expiry_plus_the_retention_rounded_up(
        make_driver, prefix, clock, raw):
    # Past its expiry a message stays stored for the retention: the driver, not Swift's
    # expirer, removes it, and reports it.
    driver = make_driver(clock=clock, expired_retention=RETENTION)
    broker = Synchronous(Broker(driver.target, Limits()))
    broker.create_queue(PROJECT, "q", {**POLICY, "_dead_letter_queue_messages_ttl": 120})
    [free, delayed] = post(driver, "q", 1, ttl=60) + post(driver, "q", 1, ttl=60, delay=30)
    at = {kind: delete_at(raw, prefix, "q", name)
          for kind, name in objects_of(raw, prefix, "q", delayed).items()}
    # START + 60.25, rounded up, plus the retention
    assert at == {"m/": 4_000_000_061 + RETENTION, "a/": 4_000_000_061 + RETENTION}

    # A claim: the message lives until the claim's expiry plus grace, its marker longer.
    claim = broker.claim(PROJECT, "q", ttl=30, grace=60, limit=1)
    assert [m.id for m in claim.messages] == [free]
    assert delete_at(raw, prefix, "q", f"k/{claim.id}") == 4_000_000_031
    at = {kind: delete_at(raw, prefix, "q", name)
          for kind, name in objects_of(raw, prefix, "q", free).items()}
    assert at["m/"] == at["a/"] == 4_000_000_091 + RETENTION
    assert at["c/"] >= at["m/"]
    [message] = driver.messages.get(PROJECT, "q", [free])
    assert at["m/"] == math.ceil(message.expires) + RETENTION

    clock.advance(10)
    broker.renew_claim(PROJECT, "q", claim.id, 100, 60)
    assert delete_at(raw, prefix, "q", f"k/{claim.id}") == 4_000_000_111
    at = {kind: delete_at(raw, prefix, "q", name)
          for kind, name in objects_of(raw, prefix, "q", free).items()}
    assert at["m/"] == at["a/"] == 4_000_000_171 + RETENTION
    assert at["c/"] >= at["m/"]

    # Released, then moved by the next claim: the dead-letter ttl from the move on.
    broker.release_claim(PROJECT, "q", claim.id)
    clock.advance(10)
    broker.claim(PROJECT, "q", ttl=30, grace=60, limit=1)
    at = {kind: delete_at(raw, prefix, "dlq", name)
          for kind, name in objects_of(raw, prefix, "dlq", free).items()}
    assert at == {"m/": 4_000_000_141 + RETENTION,  # START + 20 + 120
                  "a/": 4_000_000_141 + RETENTION}

    for queue in ("q", "dlq"):
        for name in names(raw, prefix, queue):
            if name != "meta":
                assert delete_at(raw, prefix, queue, name) > START, name


def test_an_expired_message_is_invisible_to_every_read_at_once(make_driver, prefix, clock,
                                                              raw):
    driver = make_driver(clock=clock)
    broker = Synchronous(Broker(driver.target, Limits()))
    ids = post(driver, "q", 2, ttl=60) + post(driver, "q", 1, ttl=60, delay=30)
    claim = broker.claim(PROJECT, "q", ttl=30, grace=0, limit=1)
    assert [m.id for m in claim.messages] == ids[:1]

    clock.now = START + 60 - 1e-5
    assert len(driver.messages.get(PROJECT, "q", ids)) == 3
    assert broker.stats(PROJECT, "q").total == 3

    clock.now = START + 60  # exactly their expiry
    assert driver.messages.get(PROJECT, "q", ids) == []
    with pytest.raises(errors.MessageNotFound):
        broker.get_message(PROJECT, "q", ids[1])
    assert listed(broker, "q") == []
    stats = broker.stats(PROJECT, "q")
    assert (stats.free, stats.claimed, stats.delayed) == (0, 0, 0)
    assert stats.oldest is None and stats.newest is None
    broker.delete_message(PROJECT, "q", ids[0], claim.id)  # gone already: nothing to refuse
    # Swift itself still holds and lists them (their X-Delete-At is Swift's, far ahead).
    assert sorted(names(raw, prefix, "q", "m/")) == [f"m/{i}" for i in ids]
    assert len(names(raw, prefix, "q", "a/")) == 3

    assert broker.claim(PROJECT, "q", ttl=30, grace=0, limit=10) is None
    assert broker.pop(PROJECT, "q", 10) == []
    # The claim that met them removed them, and reported each expiry.
    assert [n for n in names(raw, prefix, "q") if n.startswith(("m/", "a/"))] == []
    assert sorted(e.message_id for e in driver.trail.events(PROJECT, "q")
                  if e.kind == events.EXPIRED) == sorted(ids)


# Expiry: each expired message removed and reported once, by the winner of its marker


def expired_ids(driver: Driver, queue: str) -> list[str]:
    """The message ids of the queue's expired events, as many times as recorded."""
    return sorted(e.message_id for e in driver.trail.events(PROJECT, queue)
                  if e.kind == events.EXPIRED)


def reporting(make_driver: Callable[..., Driver], ended: list[str], **options: Any
              ) -> Driver:
    """A driver whose endings land in *ended* (thread-safe: list.extend)."""
    return make_driver(endings=ended.extend, **options)


class DeleteFinds:
    """A connection whose DELETE of a message answers 204 even when the message is gone:
    what Swift may answer two racing DELETEs (it has no delete-if), made certain."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def delete_object(self, container: str, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._conn.delete_object(container, name, *args, **kwargs)
        except ClientException as exc:
            if exc.http_status != 404 or not name.startswith(layout.MESSAGE_PREFIX):
                raise
            return None


def together(*works: Callable[[], Any]) -> list[Any]:
    """Run *works* in threads started at once; their results."""
    start = threading.Barrier(len(works))

    def at_once(work: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: (start.wait(), work())[1]

    threads = [Background(at_once(work)) for work in works]
    for thread in threads:
        thread.start()
    return [thread.result() for thread in threads]


def test_claimers_racing_over_an_expired_head_report_each_expired_message_once(
        make_driver, raw, prefix, clock):
    # Several processes' claims meet the same expired entries at the head of the index
    # at once: two racing DELETEs may both answer 204, so only the marker tells who
    # reports.
    ended: list[str] = []
    poster = make_driver(clock=clock)
    gone = post(poster, "q", 24, ttl=60)
    live = post(poster, "q", 6, ttl=3600)
    clock.advance(61)
    claimers = [reporting(make_driver, ended, clock=clock, wrap=DeleteFinds)
                for _ in range(4)]
    for claimer in claimers:
        claimer._objects.swift.get_auth()  # logged in before the race
    claims = together(*(lambda c=claimer: c.claims.create(PROJECT, "q", ttl=60, grace=0, limit=3,
                                                  dead_letter=None)
                        for claimer in claimers))
    claimed = sorted(m.id for claim in claims if claim for m in claim.messages)
    assert len(claimed) == len(set(claimed)) and set(claimed) <= set(live)
    reporting(make_driver, ended, clock=clock).reap()  # whatever the claims left
    assert ended.count(events.EXPIRED) == len(gone)
    assert expired_ids(poster, "q") == sorted(gone)
    assert [n for n in names(raw, prefix, "q", "m/")] == [
        f"m/{i}" for i in live]


def test_two_reapers_racing_report_each_expired_message_once(make_driver, raw, prefix,
                                                              clock):
    ended: list[str] = []
    poster = make_driver(clock=clock)
    gone = {queue: post(poster, queue, 20, ttl=60) for queue in ("q", "r")}
    kept = post(poster, "r", 2, ttl=3600)
    clock.advance(61)
    reapers = [reporting(make_driver, ended, clock=clock, wrap=DeleteFinds)
               for _ in range(2)]
    for reaper in reapers:
        reaper._objects.swift.get_auth()
    together(*(reaper.reap for reaper in reapers))
    assert ended.count(events.EXPIRED) == 40
    for queue, ids in gone.items():
        assert expired_ids(poster, queue) == sorted(ids)
    assert names(raw, prefix, "q", "m/") == []
    assert names(raw, prefix, "r", "m/") == [f"m/{i}" for i in kept]
    assert [m.id for m in poster.messages.get(PROJECT, "r", kept)] == kept


def test_a_reaper_deleting_after_another_read_the_message_does_not_report_it_again(
        make_driver, clock):
    # Both read the message as expired before either deletes it, and both DELETEs answer
    # 204: only the marker's winner reports it.
    ended: list[str] = []
    [mid] = post(make_driver(clock=clock), "q", 1, ttl=60)
    clock.advance(61)
    hold = Hold(("delete_object", layout.MESSAGE_PREFIX))
    first = reporting(make_driver, ended, clock=clock,
                      wrap=lambda conn: DeleteFinds(hold.wrap(conn)))
    second = reporting(make_driver, ended, clock=clock, wrap=DeleteFinds)
    reaping = Background(first.reap)
    reaping.start()
    hold.reached("delete_object", layout.MESSAGE_PREFIX)
    second.reap()
    hold.release("delete_object", layout.MESSAGE_PREFIX)
    reaping.result()
    assert ended == [events.EXPIRED]
    assert expired_ids(first, "q") == [mid]


def test_a_message_moving_when_it_expires_is_moved_on_not_reaped(make_driver, raw, prefix,
                                                                   clock):
    # Its mover stalls after marking it moving; by the reaper's pass its expiry in the
    # source has passed, but the dead-letter queue's ttl keeps it alive there.
    ended: list[str] = []
    broker = Synchronous(Broker(make_driver(clock=clock).target, Limits()))
    broker.create_queue(PROJECT, "q", {**POLICY, "_dead_letter_queue_messages_ttl": 3600})
    [mid] = post(broker.driver, "q", 1, ttl=60)
    broker.release_claim(PROJECT, "q", broker.claim(PROJECT, "q", ttl=30, grace=0,
                                                    limit=1).id)
    hold = Hold(("put_object", layout.MESSAGE_PREFIX))  # the copy into the dead-letter queue
    mover = reporting(make_driver, ended, clock=clock, wrap=hold.wrap)
    moving_broker = Synchronous(Broker(mover.target, Limits()))
    moving = Background(lambda: moving_broker.claim(PROJECT, "q", ttl=30, grace=0, limit=1))
    moving.start()
    hold.reached("put_object", layout.MESSAGE_PREFIX)
    clock.advance(61)
    reporting(make_driver, ended, clock=clock).reap()
    hold.release("put_object", layout.MESSAGE_PREFIX)
    assert moving.result() is None
    assert ended == [events.DEAD_LETTERED]
    [moved] = broker.get_messages(PROJECT, "dlq", [mid])
    assert (moved.source_queue, moved.ttl) == ("q", 3600)
    assert [n for n in names(raw, prefix, "q") if n.startswith(("m/", "a/"))] == []


def test_the_reaper_thread_empties_a_queue_nobody_touches(make_driver, raw, prefix, clock):
    ended: list[str] = []
    ids = post(make_driver(clock=clock), "idle", 5, ttl=60)
    clock.advance(61)
    reporting(make_driver, ended, clock=clock, reap_interval=1)
    deadline = time.monotonic() + 15
    while ended.count(events.EXPIRED) < len(ids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ended == [events.EXPIRED] * len(ids)
    assert [n for n in names(raw, prefix, "idle") if n.startswith(("m/", "a/"))] == []
    # Each pass's lease, in the writers container, lapsed by now (Swift still lists it:
    # no expirer runs here): one process of the deployment reaps per pass.
    _, listing = raw.get_container(layout.writers_container(prefix))
    assert layout.REAPER in [item["name"] for item in listing]


def test_a_message_whose_delay_runs_past_its_ttl_is_reaped_at_its_expiry(make_driver, raw,
                                                                         prefix, clock):
    ended: list[str] = []
    driver = reporting(make_driver, ended, clock=clock)
    [late] = post(driver, "q", 1, ttl=60, delay=120)
    # Its index entry is listed from its expiry on, not from its due time.
    [entry] = [layout.Entry.parse(n) for n in names(raw, prefix, "q", "a/")]
    assert entry.available == entry.expires == round((START + 60) * 1_000_000)
    clock.advance(59)
    driver.reap()
    assert ended == [] and driver.queues.stats(PROJECT, "q").delayed == 1
    clock.advance(1)
    driver.reap()
    assert ended == [events.EXPIRED]
    [event] = [e for e in driver.trail.events(PROJECT, "q") if e.kind == events.EXPIRED]
    assert (event.message_id, event.time, event.expires) == (late, START + 60, START + 60)
    assert names(raw, prefix, "q", "m/") == names(raw, prefix, "q", "a/") == []


def test_an_expiry_whose_winner_died_is_completed_later_and_not_reported(
        make_driver, raw, prefix, clock):
    ended: list[str] = []
    driver = reporting(make_driver, ended, clock=clock)
    [mid] = post(driver, "q", 1, ttl=60)
    clock.advance(61)
    # A reaper won the message's expire marker, then died before its DELETE.
    raw.put_object(layout.container(prefix, PROJECT, "q"), layout.marker_name(mid, 1),
                   layout.encode({"kind": layout.EXPIRE, "at": round(clock.now * 1e6)}))
    clock.advance(1)  # past the settle time: its winner may be alive yet, deleting
    driver.reap()
    assert names(raw, prefix, "q", "m/") == [f"m/{mid}"]
    clock.advance(59)
    driver.reap()
    assert names(raw, prefix, "q", "m/") == names(raw, prefix, "q", "a/") == []
    assert ended == [] and expired_ids(driver, "q") == []  # the winner's to report


# Swift requests per operation

TRAIL_PUT = 1  # the one object of a request's events
# Tallies are written in the background, whenever a flush falls: measured operations leave
# them out (they are written on close).
NO_FLUSH = {"tally_flush_interval": 3600.0}


class RequestLog:
    """Counts the requests of every connection it wraps (not their token fetches)."""

    REQUESTS = ("head_account", "get_account", "post_account", "head_container",
                "get_container", "put_container", "post_container", "delete_container",
                "head_object", "get_object", "put_object", "post_object", "copy_object",
                "delete_object")

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def wrap(self, conn: Connection) -> Any:
        log = self

        class Counting:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(conn, name)
                if name not in log.REQUESTS:
                    return attr

                def call(*args: Any, **kwargs: Any) -> Any:
                    assert not kwargs.get("full_listing"), "one request, not a listing loop"
                    with log._lock:
                        log.counts[name] += 1
                    return attr(*args, **kwargs)

                return call

        return Counting()

    def measure(self, operation: Callable[[], Any]) -> tuple[int, Counter[str], Any]:
        with self._lock:
            before = Counter(self.counts)
        result = operation()
        with self._lock:
            spent = self.counts - before
        return sum(spent.values()), spent, result


def request_costs(make_driver: Callable[..., Driver], busy: int, **options: Any
                  ) -> dict[str, tuple[int, Counter[str]]]:
    """Swift requests of each API operation (through the broker, as the API calls it) on a
    queue that also holds *busy* delayed and *busy* claimed messages, posted earlier;
    *options* go to make_driver."""
    log = RequestLog()
    clock = FakeClock(START)
    queue = f"q{busy}"
    driver = make_driver(clock=clock, wrap=log.wrap, **{**NO_FLUSH, **options})
    broker = Synchronous(Broker(driver.target, Limits()))
    broker.create_queue(PROJECT, queue, {})
    if busy:
        post(driver, queue, busy, delay=600)
        post(driver, queue, busy)
        assert len(driver.claims.create(PROJECT, queue, ttl=600, grace=60, limit=busy,
                                dead_letter=None).messages) == busy

    costs: dict[str, tuple[int, Counter[str]]] = {}

    def measure(name: str, operation: Callable[[], Any]) -> Any:
        total, spent, result = log.measure(operation)
        costs[name] = (total, spent)
        return result

    def posting(n: int) -> Callable[[], list[str]]:
        from delayq.validation import PostedMessage

        return lambda: broker.post(PROJECT, queue, CLIENT,
                                   [PostedMessage({"n": i}, 3600, None) for i in range(n)],
                                   size=0)

    def claiming(n: int) -> Callable[[], Any]:
        return lambda: broker.claim(PROJECT, queue, ttl=60, grace=60, limit=n)

    [one] = measure("post 1 message", posting(1))
    ten = measure("post 10 messages", posting(10))
    claim1 = measure("claim 1 message", claiming(1))
    claim10 = measure("claim 10 messages", claiming(10))
    assert [m.id for m in claim1.messages] == [one]
    assert [m.id for m in claim10.messages] == ten
    measure("get 1 message", lambda: broker.get_message(PROJECT, queue, one))
    measure("get 10 messages", lambda: broker.get_messages(PROJECT, queue, ten))
    measure("get a claim of 10", lambda: broker.get_claim(PROJECT, queue, claim10.id))
    measure("renew a claim of 1", lambda: broker.renew_claim(PROJECT, queue, claim1.id, 60,
                                                             60))
    measure("renew a claim of 10", lambda: broker.renew_claim(PROJECT, queue, claim10.id, 60,
                                                              60))
    measure("delete 1 message with its claim",
            lambda: broker.delete_message(PROJECT, queue, one, claim1.id))
    measure("release a claim of 10", lambda: broker.release_claim(PROJECT, queue, claim10.id))
    measure("queue stats", lambda: broker.stats(PROJECT, queue))
    page = measure("list a page of 10 (claimed, delayed included)", lambda: broker.list_messages(
        PROJECT, queue, client_id=CLIENT, marker=None, limit=10, echo=True,
        include_claimed=True, include_delayed=True))
    assert len(page[0]) == 10
    page = measure("list a page of 10 (free only)", lambda: broker.list_messages(
        PROJECT, queue, client_id=CLIENT, marker=None, limit=10, echo=True,
        include_claimed=False, include_delayed=False))
    assert [m.id for m in page[0]] == ten
    broker.delete_messages(PROJECT, queue, ten[1:])
    driver.queues.set_metadata(PROJECT, queue, {"_max_claim_count": 1,
                                               "_dead_letter_queue": f"{queue}-dlq"})
    assert measure("claim meeting 1 worn-out message (dead-letter move)", claiming(10)) is None
    assert [m.id for m in broker.get_messages(PROJECT, f"{queue}-dlq", ten)] == ten[:1]
    return costs


def test_swift_requests_per_operation_do_not_grow_with_delayed_or_claimed_messages(
        make_driver):
    busy = 150
    empty, full = request_costs(make_driver, 0), request_costs(make_driver, busy)
    rows = ["| Operation | Swift requests | with 300 delayed + claimed messages | requests |",
            "|---|---:|---:|---|"]
    for name, (total, spent) in empty.items():
        detail = ", ".join(f"{n} {method}" for method, n in sorted(spent.items()))
        rows.append(f"| {name} | {total} | {full[name][0]} | {detail} |")
    print("\n\nSwift requests per operation (the driver's token fetches and the clock's "
          "reading every clock_sync_interval not included):\n" + "\n".join(rows))

    # A page reads the messages of one listing (at least 20): more when the queue has more.
    pages = {"list a page of 10 (claimed, delayed included)", "list a page of 10 (free only)"}
    assert {name: total for name, (total, _) in empty.items() if name not in pages} == {
        name: total for name, (total, _) in full.items() if name not in pages}
    assert empty["list a page of 10 (claimed, delayed included)"][0] <= 1 + 20
    assert full["list a page of 10 (claimed, delayed included)"][0] <= 1 + 20
    # The event trail (on by default) adds its object's PUT to each post and claim.
    assert empty["claim 1 message"][0] <= 10 + TRAIL_PUT
    assert empty["claim 10 messages"][0] <= 10 * 7 + 3 + TRAIL_PUT
    assert empty["post 10 messages"][0] <= 10 * 2 + 1 + TRAIL_PUT


def test_a_page_of_free_messages_costs_the_same_behind_delayed_ones(make_driver):
    log = RequestLog()
    driver = make_driver(clock=FakeClock(START), wrap=log.wrap, **NO_FLUSH)
    post(driver, "q", 60, delay=600)
    free = post(driver, "q", 10)
    total, _, (page, _) = log.measure(lambda: driver.messages.page(
        PROJECT, "q", marker=LISTING_START, limit=10, exclude_client=None, include_claimed=False,
        include_delayed=False))
    assert [m.id for m in page] == free
    assert total <= 1 + 20, f"{total} requests for a page of 10"


# Tallies: the /metrics gauges


def stats_counts(driver: Driver, queue: str) -> QueueCounts:
    """What ``queue_stats`` counts (a listing of the whole index), as QueueCounts."""
    stats = driver.queues.stats(PROJECT, queue)
    return QueueCounts(stats.free, stats.claimed, stats.delayed)


def counted_by_a_new_process(make_driver, clock, queue: str = "q") -> QueueCounts:
    """The queue's counts as a process that wrote nothing reads them: from the tally
    objects alone, checked against a listing of the whole index."""
    reader = make_driver(clock=clock)
    counts = reader.queues.counts(PROJECT, queue)
    assert counts == stats_counts(reader, queue), queue
    return counts


def tally_writers(raw: Connection, prefix: str, queue: str) -> set[str]:
    return {name.rsplit("/", 1)[1] for name in names(raw, prefix, queue, layout.TALLY_PREFIX)}


def test_tallies_of_two_writers_add_up_for_a_third_process_once_written(make_driver, prefix,
                                                                         clock, raw):
    first, second = make_driver(clock=clock, **NO_FLUSH), make_driver(clock=clock, **NO_FLUSH)
    reader = make_driver(clock=clock)
    post(first, "q", 3, delay=60)
    post(first, "q", 4)
    post(second, "q", 2, ttl=30)
    held = second.claims.create(PROJECT, "q", ttl=120, grace=60, limit=3, dead_letter=None)
    assert held is not None and len(held.messages) == 3
    # The first process deletes a message the second claimed, and renews what is left.
    first.messages.delete_many(PROJECT, "q", [held.messages[0].id])
    first.claims.renew(PROJECT, "q", held.id, 300, 60)
    expected = QueueCounts(free=3, claimed=2, delayed=3)
    assert stats_counts(reader, "q") == expected
    # Each process sees its own changes at once, the other's only once written.
    assert reader.queues.counts(PROJECT, "q") == QueueCounts(0, 0, 0)
    assert tally_writers(raw, prefix, "q") == set()

    first.flush_tallies()
    second.close()
    assert len(tally_writers(raw, prefix, "q")) == 2
    assert reader.queues.counts(PROJECT, "q") == expected
    clock.advance(60.0005)  # the delay passes (the claim extended the ttl-30 messages)
    assert reader.queues.counts(PROJECT, "q") == stats_counts(reader, "q") == QueueCounts(
        free=6, claimed=2, delayed=0)

    # A purge by another process drops every writer's tallies; the first process, which
    # had written some, starts again from what it counts after.
    reader.queues.purge(PROJECT, "q")
    post(first, "q", 1, delay=10)
    first.flush_tallies()
    assert reader.queues.counts(PROJECT, "q") == stats_counts(reader, "q") == QueueCounts(
        0, 0, 1)


def slot_leases(raw: Connection, prefix: str) -> list[str]:
    """The writer slots' lease objects Swift lists (expired ones too: no expirer runs)."""
    _, listing = raw.get_container(layout.writers_container(prefix), full_listing=True)
    return [item["name"] for item in listing]


def lease_of(raw: Connection, prefix: str, slot: int) -> tuple[int, dict[str, Any]]:
    """A slot's lease: its X-Delete-At and its body."""
    headers, body = raw.get_object(layout.writers_container(prefix), layout.slot_name(slot))
    return int(headers["x-delete-at"]), json.loads(body)


def test_a_slot_freed_on_close_is_taken_again_and_its_sums_go_on(make_driver, prefix, clock,
                                                                 raw):
    first, second = make_driver(clock=clock, **NO_FLUSH), make_driver(clock=clock, **NO_FLUSH)
    post(first, "q", 3, delay=60)
    post(second, "q", 2)
    first.flush_tallies()
    second.flush_tallies()
    # Alive at once: two slots, the lowest first.
    assert tally_writers(raw, prefix, "q") == {"0", "1"}
    assert slot_leases(raw, prefix) == ["slot/0", "slot/1"]
    first.close()
    assert slot_leases(raw, prefix) == ["slot/1"]  # freed at once

    # A process started since takes the first one's slot and adds to its sums (the same
    # clock: its messages fall in the very blocks the first one's did).
    third = make_driver(clock=clock, **NO_FLUSH)
    post(third, "q", 4, delay=60)
    third.flush_tallies()
    assert tally_writers(raw, prefix, "q") == {"0", "1"}
    assert slot_leases(raw, prefix) == ["slot/0", "slot/1"]
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(free=2, claimed=0, delayed=7)
    # And so on, process after process: no page ever holds more objects than slots.
    for _ in range(3):
        third.close()
        third = make_driver(clock=clock, **NO_FLUSH)
        post(third, "q", 1)
        third.flush_tallies()
    assert tally_writers(raw, prefix, "q") == {"0", "1"}
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(
        free=5, claimed=0, delayed=7)


def test_the_slot_of_a_process_killed_is_taken_once_its_lease_expires(make_driver, prefix,
                                                                      clock, raw):
    from tests.swift_crash import tally_and_die

    auth = SWIFT.auth()
    child = SPAWN.Process(target=tally_and_die, args=(
        (auth.auth_url, auth.user, auth.key), prefix, PROJECT, "q", clock.now, CLIENT, 3))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    expires, _ = lease_of(raw, prefix, 0)  # the dead process's lease, not deleted
    assert tally_writers(raw, prefix, "q") == {"0"}

    # While its lease runs, the slot stays the dead process's.
    meanwhile = make_driver(clock=clock, tally_writer_lease=3, **NO_FLUSH)
    post(meanwhile, "q", 1)
    meanwhile.flush_tallies()
    assert tally_writers(raw, prefix, "q") == {"0", "1"}
    meanwhile.close()

    while time.time() < expires + 0.05:
        time.sleep(0.05)
    heir = make_driver(clock=clock, tally_writer_lease=3, **NO_FLUSH)
    post(heir, "q", 2, delay=60)  # the dead process's blocks: its sums go on
    heir.flush_tallies()
    assert lease_of(raw, prefix, 0)[1]["pid"] == os.getpid()
    assert tally_writers(raw, prefix, "q") == {"0", "1"}
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(free=1, claimed=0, delayed=4)


def test_a_live_process_keeps_its_slot_past_its_lease_by_renewing_it(make_driver, prefix,
                                                                   clock, raw):
    holder = make_driver(clock=clock, tally_writer_lease=3, tally_flush_interval=0.2)
    post(holder, "q", 1)
    holder.flush_tallies()
    taken, lease = lease_of(raw, prefix, 0)
    time.sleep(4.5)  # longer than the lease
    # Still the holder's: the same lease object (not one taken again), expiring later.
    renewed, still = lease_of(raw, prefix, 0)
    assert still == lease
    assert renewed >= taken + 4
    other = make_driver(clock=clock, **NO_FLUSH)
    post(other, "q", 1, delay=60)
    other.flush_tallies()
    post(holder, "q", 1, delay=60)
    holder.flush_tallies()
    assert tally_writers(raw, prefix, "q") == {"0", "1"}
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(free=1, claimed=0, delayed=2)


def test_a_process_that_finds_its_slot_taken_writes_under_another_one(make_driver, prefix,
                                                                      clock, raw):
    # Its lease long enough that only the renewal's read back tells it the slot is gone.
    first = make_driver(clock=clock, tally_writer_lease=10, **NO_FLUSH)
    post(first, "q", 2, delay=60)
    first.flush_tallies()
    # Its lease vanishes (as if an exclusive create had raced its renewal) and another
    # process takes the slot, going on from the sums there.
    raw.delete_object(layout.writers_container(prefix), layout.slot_name(0))
    second = make_driver(clock=clock, **NO_FLUSH)
    post(second, "q", 1, delay=60)
    second.flush_tallies()
    assert tally_writers(raw, prefix, "q") == {"0"}
    time.sleep(3.5)  # the first process renews its lease after 2 s, and finds it another's
    post(first, "q", 1, delay=60)
    first.flush_tallies()
    # Written under slot 0, its sums would have overwritten the second process's.
    assert tally_writers(raw, prefix, "q") == {"0", "1"}
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(free=0, claimed=0, delayed=4)


def test_tallies_written_after_a_concurrent_run_agree_with_stats(make_driver, clock):
    """Threads of two processes post, claim (racing for the same messages, moving worn-out
    ones to a dead-letter queue), renew, release and delete for a few seconds."""
    drivers = [make_driver(clock=clock, tally_flush_interval=0.2) for _ in range(2)]
    brokers = [Synchronous(Broker(driver.target, Limits())) for driver in drivers]
    brokers[0].create_queue(PROJECT, "q", {"_max_claim_count": 2,
                                           "_dead_letter_queue": "dlq"})
    deadline = time.monotonic() + 4
    failures: list[BaseException] = []

    def work(worker: int) -> None:
        broker = brokers[worker % 2]
        try:
            while time.monotonic() < deadline:
                post(broker.driver, "q", 2, delay=worker % 2 * 600)
                held = broker.claim(PROJECT, "q", ttl=600, grace=60, limit=3)
                if held is None:
                    continue
                first, *rest = held.messages
                broker.delete_message(PROJECT, "q", first.id, held.id)
                if worker % 3 == 0:
                    broker.renew_claim(PROJECT, "q", held.id, 900, 60)
                else:
                    broker.release_claim(PROJECT, "q", held.id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    # Whatever the run left, the queue then holds free and claimed messages too.
    post(drivers[0], "q", 3)
    assert brokers[0].claim(PROJECT, "q", ttl=600, grace=60, limit=1) is not None
    for driver in drivers:
        driver.close()
    reader = make_driver(clock=clock)
    for queue in ("q", "dlq"):
        assert reader.queues.counts(PROJECT, queue) == stats_counts(reader, queue), queue
    counts = reader.queues.counts(PROJECT, "q")
    assert counts.free and counts.claimed and counts.delayed


def test_a_count_costs_the_same_requests_behind_10_or_300_delayed_messages(make_driver):
    log = RequestLog()
    writer = make_driver(clock=FakeClock(START), **NO_FLUSH)
    reader = make_driver(clock=FakeClock(START), wrap=log.wrap)
    costs = []
    posted = 0
    for backlog in (10, 300):
        posted += len(post(writer, "q", backlog - posted, delay=600))
        writer.flush_tallies()
        total, _, counts = log.measure(lambda: reader.queues.counts(PROJECT, "q"))
        assert counts == QueueCounts(0, 0, backlog)
        costs.append(total)
    # A listing of each level's page and a GET of the one writer's object there.
    assert costs[0] == costs[1] <= 2 * 4


# Time


CLOCK_READING_ERROR = 1.0  # seconds


def test_time_is_the_swift_proxys_and_a_step_of_this_hosts_clock_changes_nothing(
        make_driver, monkeypatch):
    every_time = make_driver(clock_sync_interval=0.0)  # asks the proxy at every reading
    synced = make_driver()
    # A reading errs by up to half the round trip of the proxy request behind it, which a
    # loaded machine stretches to tenths of a second; the step below is an hour.
    assert abs(every_time.now() - time.time()) < CLOCK_READING_ERROR
    assert abs(synced.now() - time.time()) < CLOCK_READING_ERROR
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    started_after_the_step = make_driver()
    for driver in (every_time, synced, started_after_the_step):
        assert abs(driver.now() - real()) < CLOCK_READING_ERROR
    [message_id] = post(started_after_the_step, "q", 1)
    [message] = synced.messages.get(PROJECT, "q", [message_id])
    assert abs(message.created - real()) < 1


class SlowReads:
    """A connection whose object HEADs are answered *delay* seconds late, as a loaded
    proxy may answer them."""

    def __init__(self, conn: Connection, delay: float) -> None:
        self._conn = conn
        self._delay = delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def head_object(self, *args: Any, **kwargs: Any) -> Any:
        answer = self._conn.head_object(*args, **kwargs)
        time.sleep(self._delay)
        return answer


def test_a_slow_read_of_the_proxys_stamp_does_not_move_the_clock(make_driver):
    # The proxy stamps the clock object at its PUT; the HEAD only reads the stamp. Placed
    # at the middle of the whole PUT and HEAD, a stamp read 0.6 s late would put this
    # process 0.3 s behind every other one, and a message posted through another process
    # would be due, for this one, 0.3 s after its post returned.
    slow = make_driver(wrap=lambda conn: SlowReads(conn, 0.6))
    slow.now()  # reads the proxy's clock
    before = time.time()
    reading = slow.now()  # carried forward from that reading
    after = time.time()
    assert before - 0.05 < reading < after + 0.05


def test_api_processes_and_threads_reading_the_proxys_clock_at_once_all_get_a_reading(
        make_driver):
    """Concurrent overwrites of one object can make a HEAD right after a PUT miss it (404):
    the object server removes the older file while the HEAD opens it. Each driver reads
    through its own object, and a driver's threads one at a time."""
    drivers = [make_driver(clock_sync_interval=0.0) for _ in range(4)]
    failures: list[BaseException] = []

    def read(driver: Driver) -> None:
        try:
            for _ in range(25):
                assert abs(driver.now() - time.time()) < CLOCK_READING_ERROR
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=read, args=(driver,))
               for driver in drivers for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


# Swift unreachable, or refusing the credentials


def unreachable_driver(key: str | None = None, clock: Callable[[], float] | None = None
                       ) -> Driver:
    """A driver on a closed loopback port, or (with *key*) on the test Swift with *key*."""
    auth = SWIFT.auth()
    if key is None:
        url = f"http://127.0.0.1:{free_port()}/auth/v1.0"
        return Synchronous(Driver(connector(url, auth.user, auth.key), prefix="down", clock=clock))
    return Synchronous(Driver(connector(auth.auth_url, auth.user, key), prefix="down", clock=clock))


OPERATIONS: dict[str, Callable[[Driver], Any]] = {
    "post": lambda d: post(d, "q", 1),
    "claim": lambda d: d.claims.create(PROJECT, "q", ttl=60, grace=60, limit=1, dead_letter=None),
    "get": lambda d: d.messages.get(PROJECT, "q", ["0" * 24]),
    "stats": lambda d: d.queues.stats(PROJECT, "q"),
}


@pytest.mark.parametrize(("cause", "clock"), [
    ("closed-port", "proxy"), ("closed-port", "fake"), ("wrong-key", "fake")])
def test_an_unreachable_or_refusing_swift_is_storage_unavailable_at_once(cause, clock):
    # Tempauth answers a wrong key after about a second (its brute-force delay).
    driver = unreachable_driver("wrong" if cause == "wrong-key" else None,
                                FakeClock(START) if clock == "fake" else None)
    operations = dict(OPERATIONS)
    if cause == "wrong-key":
        del operations["stats"]
    for name, operation in operations.items():
        began = time.monotonic()
        with pytest.raises(errors.StorageUnavailable):
            operation(driver)
        assert time.monotonic() - began < 3, name  # the connection's timeout is 30 s
    if cause == "closed-port":
        assert driver.ping() is False
    driver.close()


@pytest.mark.parametrize("cause", ["closed-port", "wrong-key"])
def test_an_unreachable_or_refusing_swift_answers_503_json(make_conf, cause):
    driver = unreachable_driver("wrong" if cause == "wrong-key" else None)
    client = testing.TestClient(create_app(make_conf(), driver=driver.target))
    headers = {"Client-ID": CLIENT, "X-Project-ID": PROJECT}
    requests = [("POST", "/v2/queues/q/messages", {"messages": [{"body": 1}]}),
                ("POST", "/v2/queues/q/claims", {}),
                ("GET", f"/v2/queues/q/messages/{'0' * 24}", None),
                ("GET", "/v2/queues/q/stats", None)]
    if cause == "wrong-key":
        requests = requests[:2]
    for method, path, body in requests:
        response = client.simulate_request(method, path, headers=headers, json=body)
        assert response.status_code == 503, (path, response.text)
        assert response.json["title"] == "Service temporarily unavailable"
        assert set(response.json) == {"title", "description"}
    health = client.simulate_get("/v2/health", headers=headers)
    assert health.status_code == 503
    assert health.json == {"storage_reachable": False, "message_store": "swift",
                           "operation_status": {}}
    if cause == "closed-port":
        assert client.simulate_get("/v2/ping").status_code == 503
    driver.close()


# Configuration


def test_load_driver_builds_a_working_swift_driver_from_the_configuration(prefix, raw):
    auth = SWIFT.auth()
    conf = delayq_conf.load([])
    group = "drivers:message_store:swift"
    conf.set_override("message_store", "swift", group="drivers")
    for name, value in {"auth_url": auth.auth_url, "user": auth.user, "key": auth.key,
                        "container_prefix": prefix, "claim_settle_time": 0.4}.items():
        conf.set_override(name, value, group=group)
    driver = Synchronous(load_driver(conf))
    try:
        assert isinstance(driver.target, Driver) and driver.name == "swift"
        assert driver.ping() is True
        broker = Synchronous(Broker(driver.target, Limits()))
        [message_id] = post(driver, "from-conf", 1)
        began = time.monotonic()
        claim = broker.claim(PROJECT, "from-conf", ttl=60, grace=60, limit=1)
        assert time.monotonic() - began >= 0.4  # the configured settle time
        assert [m.id for m in claim.messages] == [message_id]
        _, containers = raw.get_account(prefix=f"{prefix}:")
        # The event trail is on by default: the queue's events container is made with it.
        assert [c["name"] for c in containers] == sorted([
            layout.clock_container(prefix), layout.container(prefix, PROJECT, "from-conf"),
            layout.events_container(prefix, PROJECT, "from-conf")])
        assert abs(driver.now() - time.time()) < 0.05  # the proxy's clock
    finally:
        driver.close()


# The event trail: one object per request, in a container that outlives the queue's


def trail_objects(raw: Connection, prefix: str, queue: str, project: str = PROJECT
                  ) -> list[str]:
    _, listing = raw.get_container(layout.events_container(prefix, project, queue),
                                   full_listing=True)
    return [item["name"] for item in listing]


def test_a_requests_events_are_one_object_that_swift_deletes_after_the_retention(
        make_driver, prefix, clock, raw):
    driver = make_driver(clock=clock, events_settings=events.Settings(retention=600))
    ids = post(driver, "q", 3, ttl=60)
    [name] = trail_objects(raw, prefix, "q")
    assert name.split(".")[0] == layout.time_name(round(START * 1_000_000))
    headers, body = raw.get_object(layout.events_container(prefix, PROJECT, "q"), name)
    assert int(headers["x-delete-at"]) == 4_000_000_001 + 600  # START rounded up
    assert headers["content-type"] == layout.EVENTS_CONTENT_TYPE
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines == [{"project": PROJECT, "queue": "q", "kind": "posted", "time": START,
                      "message_id": i, "due": START, "ttl": 60, "expires": START + 60}
                     for i in ids]
    # The queue's own container holds no event (its tallies may be written by now).
    assert {n.split("/")[0] for n in names(raw, prefix, "q")} - {"t"} == {"meta", "m", "a"}


def test_the_trail_outlives_the_queue_container(make_driver, prefix, clock, raw):
    driver = make_driver(clock=clock)
    post(driver, "q", 2)
    clock.advance(1)
    driver.queues.delete(PROJECT, "q")
    with pytest.raises(ClientException) as gone:
        raw.head_container(layout.container(prefix, PROJECT, "q"))
    assert gone.value.http_status == 404
    assert len(trail_objects(raw, prefix, "q")) == 2  # the post's, the deletion's
    assert [e.kind for e in driver.trail.events(PROJECT, "q")] == [
        events.POSTED, events.POSTED, events.PURGED]
    assert driver.trail.queues(PROJECT) == driver.trail.queues(None) == [(PROJECT, "q")]
    # Deleting or purging the absent queue again records nothing.
    driver.queues.delete(PROJECT, "q")
    driver.queues.purge(PROJECT, "q")
    assert len(trail_objects(raw, prefix, "q")) == 2


def cost_delta(on: Counter[str], off: Counter[str]) -> dict[str, int]:
    """Requests by kind that *on* made more (or, negative, fewer) than *off*."""
    delta = Counter(on)
    delta.subtract(off)
    return {kind: n for kind, n in delta.items() if n}


def trail_costs(make_driver: Callable[..., Driver], settings: events.Settings
                ) -> dict[str, Counter[str]]:
    """Swift requests of the operations request_costs leaves out."""
    log = RequestLog()
    driver = make_driver(clock=FakeClock(START), wrap=log.wrap, apart=True,
                         events_settings=settings, **NO_FLUSH)
    costs: dict[str, Counter[str]] = {}

    def measure(name: str, operation: Callable[[], Any]) -> None:
        costs[name] = log.measure(operation)[1]

    measure("create a queue", lambda: driver.queues.create(PROJECT, "q", {}))
    ids = post(driver, "q", 4)
    measure("delete 2 messages by id", lambda: driver.messages.delete_many(PROJECT, "q", ids[:2]))
    measure("pop 1 message", lambda: driver.messages.pop(PROJECT, "q", 1))
    measure("purge a queue of 1", lambda: driver.queues.purge(PROJECT, "q"))
    measure("delete a queue", lambda: driver.queues.delete(PROJECT, "q"))
    measure("post to a new queue", lambda: post(driver, "new", 1))
    return costs


def test_the_trail_costs_one_put_per_request_that_changes_messages(make_driver):
    on = request_costs(make_driver, 0, apart=True)
    off = request_costs(make_driver, 0, apart=True, events_settings=events.OFF)
    one_put = {"put_object": 1}
    changes = {"post 1 message", "post 10 messages", "claim 1 message",
               "claim 10 messages", "delete 1 message with its claim"}
    # The move creates the dead-letter queue, whose events container is made with it.
    moving = "claim meeting 1 worn-out message (dead-letter move)"
    assert cost_delta(on[moving][1], off[moving][1]) == {"put_object": 1,
                                                         "put_container": 1}
    for name in on.keys() - {moving}:
        assert cost_delta(on[name][1], off[name][1]) == (one_put if name in changes
                                                         else {}), name

    on, off = trail_costs(make_driver, events.ON), trail_costs(make_driver, events.OFF)
    expected = {"create a queue": {"put_container": 1},
                "post to a new queue": {"put_container": 1, "put_object": 1}}
    for name in on:
        assert cost_delta(on[name], off[name]) == expected.get(name, one_put), name


def test_with_the_trail_off_nothing_of_it_is_stored(make_driver, prefix, clock, raw):
    driver = make_driver(clock=clock, events_settings=events.OFF)
    broker = Synchronous(Broker(driver.target, Limits()))
    broker.create_queue(PROJECT, "q", POLICY)
    ids = post(driver, "q", 3)
    claim = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=1)
    clock.advance(60)
    broker.claim(PROJECT, "q", ttl=60, grace=60, limit=1)  # moves the first one
    broker.delete_messages(PROJECT, "q", ids[1:2])
    broker.pop(PROJECT, "q", 1)
    broker.delete_queue(PROJECT, "q")
    assert claim is not None
    _, containers = raw.get_account(prefix=layout.events_prefix(prefix))
    assert containers == []
    assert driver.trail.queues(PROJECT) == [(PROJECT, "dlq")]


class FailingTrail:
    """A connection whose PUTs into events containers fail as an overloaded Swift's."""

    def __init__(self, conn: Connection, prefix: str) -> None:
        self._conn = conn
        self._events = layout.events_prefix(prefix)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def put_object(self, container: str, *args: Any, **kwargs: Any) -> Any:
        if container.startswith(self._events):
            raise ClientException("overloaded", http_status=503)
        return self._conn.put_object(container, *args, **kwargs)


def test_an_event_write_that_fails_loses_the_events_not_the_request(make_driver, prefix,
                                                                     clock, caplog):
    driver = make_driver(clock=clock, wrap=lambda conn: FailingTrail(conn, prefix))
    with caplog.at_level(logging.WARNING, logger="delayq.storage.trail"):
        ids = post(driver, "q", 2)
    assert [m.id for m in driver.messages.get(PROJECT, "q", ids)] == ids
    assert any("event(s) of the trail lost" in r.getMessage() for r in caplog.records)
    assert list(driver.trail.events(PROJECT, "q")) == []


class DeletedFirst:
    """A connection whose DELETE of a message finds it deleted an instant earlier, as by a
    concurrent request (which records that deletion itself)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def delete_object(self, container: str, name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith(layout.MESSAGE_PREFIX):
            self._conn.delete_object(container, name)
        return self._conn.delete_object(container, name, *args, **kwargs)


def test_only_the_request_whose_delete_found_the_message_records_its_end(make_driver,
                                                                         clock):
    driver = make_driver(clock=clock)
    loser = make_driver(clock=clock, wrap=DeletedFirst)
    ids = post(driver, "q", 3)
    loser.messages.delete_many(PROJECT, "q", ids[:1])
    loser.messages.delete(PROJECT, "q", ids[1], None)
    assert [m.id for m in loser.messages.pop(PROJECT, "q", 1)] == ids[2:]
    assert [e.kind for e in driver.trail.events(PROJECT, "q")] == [events.POSTED] * 3
    assert driver.messages.get(PROJECT, "q", ids) == []


def test_trail_queues_names_a_hashed_project_from_its_events(make_driver, clock):
    project = "p" * 200  # past layout.LONG_PROJECT: hashed in container names
    assert layout.project_part(project).startswith(layout.HASHED)
    driver = make_driver(clock=clock)
    driver.messages.post(project, "traced", CLIENT, [NewMessage(1, 60, 0)])
    driver.queues.delete(project, "traced")
    silent = make_driver(clock=clock, events_settings=events.OFF)
    silent.messages.post(project, "untraced", CLIENT, [NewMessage(1, 60, 0)])
    expected = [(project, "traced"), (project, "untraced")]
    assert driver.trail.queues(None) == driver.trail.queues(project) == expected


def test_the_trail_has_the_fields_sqlite_writes_for_the_same_history(make_driver, tmp_path):
    expected = sqlite_trail(tmp_path, START)
    got = replayed_trail(lambda clock: make_driver(clock=clock), START)
    assert got == expected
    assert {dict(row)["kind"] for row in got} == set(events.KINDS) - {events.EXPIRED}


def test_a_purge_or_deletion_racing_this_process_tally_writes_leaves_nothing_counted(
        make_driver, clock):
    """The flusher writes every 5 ms: a write that took changes before a purge must not
    put them back after it (found by a suite run: -5 free, 3 claimed after a purge)."""
    driver = make_driver(clock=clock, tally_flush_interval=0.005)
    broker = Synchronous(Broker(driver.target, Limits()))
    for round_ in range(12):
        post(driver, "q", 3)
        post(driver, "q", 2, delay=60)
        held = broker.claim(PROJECT, "q", ttl=60, grace=60, limit=2)
        broker.delete_message(PROJECT, "q", held.messages[0].id, held.id)
        if round_ % 2:
            broker.purge_queue(PROJECT, "q")
        else:
            broker.delete_queue(PROJECT, "q")
        assert driver.queues.counts(PROJECT, "q") == QueueCounts(0, 0, 0), round_
    driver.close()
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(0, 0, 0)


def test_a_deleted_queue_brought_back_by_a_racing_tally_write_is_no_queue(make_driver,
                                                                          prefix, clock, raw):
    """Another process's tally write racing a deletion can bring the container back holding
    only that write (found by a suite run: the queue still existed after its DELETE)."""
    writer, other = make_driver(clock=clock, **NO_FLUSH), make_driver(clock=clock)
    post(writer, "q", 3)
    writer.flush_tallies()
    container = layout.container(prefix, PROJECT, "q")
    _, listing = raw.get_container(container, prefix=layout.TALLY_PREFIX)
    written = {item["name"]: raw.get_object(container, item["name"])[1] for item in listing}
    assert written
    other.queues.delete(PROJECT, "q")
    # What the race leaves: the container again, with the tally write and nothing else.
    raw.put_container(container)
    for name, body in written.items():
        raw.put_object(container, name, body)

    for reader in (other, make_driver(clock=clock)):
        assert reader.queues.get(PROJECT, "q") is None
        assert reader.queues.page(PROJECT, None, 10) == []
    # The read dropped the stray sums: a queue created again under the name counts
    # nothing of the one that was, nor does the writer's next write bring them back.
    assert names(raw, prefix, "q") == []
    assert other.queues.create(PROJECT, "q", {})
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(0, 0, 0)
    post(writer, "q", 2)
    writer.flush_tallies()
    assert counted_by_a_new_process(make_driver, clock) == QueueCounts(2, 0, 0)


def test_a_container_holding_messages_but_no_metadata_is_a_queue_finished_on_read(
        make_driver, prefix, clock, raw):
    driver = make_driver(clock=clock)
    post(driver, "q", 2)
    raw.delete_object(layout.container(prefix, PROJECT, "q"), layout.META)
    assert make_driver(clock=clock).queues.get(PROJECT, "q") == {}
    assert names(raw, prefix, "q", layout.META) == [layout.META]


class Refiller(threading.Thread):
    """Writes objects named *prefix*… into a queue's container every 10 ms, faster than a
    round of deletion, as another process does racing it, for *seconds* or until the
    container is gone."""

    def __init__(self, container: str, prefix: str, seconds: float) -> None:
        super().__init__(daemon=True)
        self.container = container
        self.prefix = prefix
        self.seconds = seconds
        self.written = 0
        self.stop = threading.Event()

    def run(self) -> None:
        auth = SWIFT.auth()
        conn = Connection(auth.auth_url, auth.user, auth.key, retries=0)
        end = time.monotonic() + self.seconds
        try:
            while time.monotonic() < end and not self.stop.is_set():
                try:
                    conn.put_object(self.container, f"{self.prefix}{self.written}", b"[]")
                except ClientException as exc:
                    if exc.http_status == 404:  # the container is gone: nothing to write to
                        return
                    raise
                self.written += 1
                time.sleep(0.01)
        finally:
            conn.close()


def test_a_deletion_outlasts_another_process_s_tally_writes_but_not_posts(make_driver,
                                                                          prefix, clock):
    """A deletion races writes that refill the container: another process's tally flush
    ends by itself and the deletion waits it out; posts may not end, and the deletion
    gives up with 503."""
    driver = make_driver(clock=clock)
    post(driver, "q", 2)
    writes = Refiller(layout.container(prefix, PROJECT, "q"),
                      layout.tally_page_prefix(0, 1), seconds=2)
    writes.start()
    while not writes.written:
        time.sleep(0.01)
    driver.queues.delete(PROJECT, "q")
    writes.join()
    assert writes.written > 10
    # A write landing after the deletion may bring the container back, holding tally
    # objects only: no queue (see the test above).
    assert driver.queues.get(PROJECT, "q") is None
    assert driver.queues.page(PROJECT, None, 10) == []

    post(driver, "p", 2)
    posts = Refiller(layout.container(prefix, PROJECT, "p"), layout.MESSAGE_PREFIX,
                     seconds=20)
    posts.start()
    while not posts.written:
        time.sleep(0.01)
    with pytest.raises(errors.StorageUnavailable):
        driver.queues.delete(PROJECT, "p")
    posts.stop.set()
    posts.join()
