"""The MongoDB driver's signals (``delayq/storage/mongo/signals.py``): which change events
are signals and of which queue, the fallback where there are no change streams, and,
against a real replica set (``DELAYQ_TEST_MONGODB_URI``), every kind of write made
through one driver reaching the listener of another.

The change events below are shaped as the MongoDB manual documents them (Change Events:
insert, update, delete), with the fields the driver's writes set (``layout.py``).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import mongomock
import pymongo.errors
import pytest
from bson import ObjectId
from falcon import testing

from delayq.conf import WSGI_GROUP
from delayq.message import NewMessage
from delayq.offload import Offload
from delayq.queue import DeadLetterPolicy
from delayq.storage.base.signals import Change, Signal
from delayq.storage.mongo import change_events
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo import signals as mongo_signals
from delayq.storage.mongo.change_events import Unresolved, translate
from delayq.storage.mongo.driver import Driver
from delayq.subscription import SubscriptionChange
from tests.apps import PROJECT_HEADERS, project_client
from tests.mongo_backend import MONGO, URI_VARIABLE

PROJECT = "proj"
WHEN = datetime(2096, 1, 1)
DB = "delayq"


def event(operation: str, collection: str, key: dict[str, Any], **fields: Any
          ) -> dict[str, Any]:
    """A change event as the manual shows it: resume token, times, namespace, key."""
    return {"_id": {"_data": "8263F0C4A2000000012B022C0100296E5A1004"},
            "operationType": operation, "clusterTime": 0, "wallTime": WHEN,
            "ns": {"db": DB, "coll": collection}, "documentKey": key, **fields}


def message_insert(project: str = PROJECT, queue: str = "q") -> dict[str, Any]:
    doc = lay.new_message(project, queue, 1, {"x": 1}, 60, 0, "client", 1_000)
    return event("insert", lay.MESSAGES, {"_id": doc["_id"]}, fullDocument=doc)


def message_update(set_: dict[str, Any], unset: tuple[str, ...] = (),
                   key: dict[str, Any] | None = None) -> dict[str, Any]:
    """An update event: ``updatedFields`` what the update set (and changed),
    ``removedFields`` what it unset."""
    return event("update", lay.MESSAGES, key or {"_id": ObjectId()}, updateDescription={
        "updatedFields": set_, "removedFields": list(unset), "truncatedArrays": []})


# What the driver's updates of a message set and unset (claims.py, claimer.py,
# messages.py), as their events show them.
CLAIM = message_update({lay.CLAIM: ObjectId(), lay.CLAIM_EXPIRES: WHEN, lay.AVAILABLE: WHEN,
                        lay.CLAIM_COUNT: 1, lay.EXPIRES: WHEN})
RENEWAL = message_update({lay.CLAIM_EXPIRES: WHEN, lay.AVAILABLE: WHEN})
RELEASE = message_update({lay.AVAILABLE: WHEN}, (lay.CLAIM, lay.CLAIM_EXPIRES))
HAND_BACK = message_update({lay.DUE: WHEN, lay.AVAILABLE: WHEN},
                           (lay.CLAIM, lay.CLAIM_EXPIRES))
DELAY_EDIT = message_update({lay.DUE: WHEN, lay.AVAILABLE: WHEN, lay.EDITS: 1})
BODY_EDIT = message_update({lay.BODY: '{"y":2}', lay.EDITS: 1})
MOVE = message_update({lay.QUEUE: "dlq", lay.SEQ: 7, lay.AVAILABLE: WHEN, lay.SOURCE: "q",
                       lay.MOVED: WHEN, lay.TTL: 60, lay.EXPIRES: WHEN},
                      (lay.CLAIM, lay.CLAIM_EXPIRES))
REDRIVE = message_update({lay.QUEUE: "q", lay.SEQ: 8, lay.AVAILABLE: WHEN},
                         (lay.CLAIM, lay.CLAIM_EXPIRES, lay.CLAIM_COUNT, lay.SOURCE,
                          lay.MOVED))


def subscription_insert(sid: str = "a" * 32, queue: str = "q") -> dict[str, Any]:
    doc = {"_id": sid, lay.PROJECT: PROJECT, lay.QUEUE: queue, lay.SUBSCRIBER: "http://x/",
           lay.TTL: 60, lay.OPTIONS: "{}", lay.CREATED: WHEN, lay.EXPIRES: WHEN}
    return event("insert", lay.SUBSCRIPTIONS, {"_id": sid}, fullDocument=doc)


def subscription_update(sid: str = "a" * 32) -> dict[str, Any]:
    return event("update", lay.SUBSCRIPTIONS, {"_id": sid}, updateDescription={
        "updatedFields": {lay.SUBSCRIBER: "http://y/"}, "removedFields": [],
        "truncatedArrays": []})


def subscription_delete(sid: str = "a" * 32) -> dict[str, Any]:
    return event("delete", lay.SUBSCRIPTIONS, {"_id": sid})


# Translation of documented events


def test_a_post_is_a_signal_of_its_queue():
    assert translate(message_insert(queue="orders")) == Signal(Change.MESSAGES, PROJECT,
                                                               "orders")


@pytest.mark.parametrize("update", [CLAIM, RENEWAL, BODY_EDIT],
                         ids=["claim", "renewal", "body edit"])
def test_updates_that_make_nothing_claimable_sooner_are_no_signal(update):
    assert translate(update) is None


@pytest.mark.parametrize("update", [RELEASE, HAND_BACK, DELAY_EDIT],
                         ids=["release", "hand-back", "delay edit"])
def test_updates_that_may_free_a_message_name_only_its_id(update):
    assert translate(update) == Unresolved(Change.MESSAGES, update["documentKey"]["_id"])


@pytest.mark.parametrize(("update", "queue"), [(MOVE, "dlq"), (REDRIVE, "q")],
                         ids=["dead-letter move", "redrive"])
def test_a_move_names_the_queue_it_lands_in(update, queue):
    assert translate(update) == Unresolved(Change.MESSAGES, update["documentKey"]["_id"],
                                           queue=queue)


def test_a_shard_key_on_the_project_completes_a_move():
    """On ``messages`` sharded by ``p`` the documentKey carries it."""
    move = message_update(MOVE["updateDescription"]["updatedFields"],
                          key={"p": "other", "_id": ObjectId()})
    assert translate(move) == Signal(Change.MESSAGES, "other", "dlq")


def test_subscription_writes_are_signals_of_subscriptions():
    assert translate(subscription_insert()) == Signal(Change.SUBSCRIPTIONS, PROJECT, "q")
    assert translate(subscription_update()) == Unresolved(Change.SUBSCRIPTIONS, "a" * 32)
    assert translate(subscription_delete()) == Unresolved(Change.SUBSCRIPTIONS, "a" * 32,
                                                          deleted=True)


@pytest.mark.parametrize("other", [
    event("insert", lay.EVENTS, {"_id": ObjectId()}, fullDocument={"p": PROJECT, "q": "q"}),
    event("insert", lay.CLAIMS, {"_id": ObjectId()}, fullDocument={"p": PROJECT, "q": "q"}),
    event("update", lay.QUEUES, {"_id": ObjectId()},
          updateDescription={"updatedFields": {lay.SEQ: 3}, "removedFields": []}),
    event("delete", lay.MESSAGES, {"_id": ObjectId()}),
    {"_id": {"_data": "82"}, "operationType": "invalidate", "clusterTime": 0},
    {"_id": {"_data": "82"}, "operationType": "dropDatabase", "ns": {"db": DB}},
], ids=["trail", "claim document", "queue counter", "message delete", "invalidate",
        "drop database"])
def test_other_writes_are_no_signal(other):
    assert translate(other) is None


ALL_EVENTS = [message_insert(), CLAIM, RENEWAL, RELEASE, HAND_BACK, DELAY_EDIT, BODY_EDIT,
              MOVE, REDRIVE, subscription_insert(), subscription_update(),
              subscription_delete(),
              event("insert", lay.EVENTS, {"_id": ObjectId()}, fullDocument={"p": "x"}),
              event("delete", lay.MESSAGES, {"_id": ObjectId()})]


def test_the_server_keeps_exactly_the_events_that_are_signals():
    """The stream's $match (run here by mongomock's aggregation) and ``translate``
    agree, and its $project keeps what ``translate`` reads."""
    collection = mongomock.MongoClient().db.events
    collection.insert_many([{**e, "_id": i} for i, e in enumerate(ALL_EVENTS)])
    kept = {doc["_id"]: doc for doc in collection.aggregate(change_events.pipeline())}
    signalling = {i for i, e in enumerate(ALL_EVENTS) if translate(e) is not None}
    assert set(kept) == signalling
    for i in kept:
        assert translate(kept[i]) == translate(ALL_EVENTS[i])
    assert "b" not in kept[0].get("fullDocument", {})  # no message body travels


# The queues of subscriptions, remembered by id


def test_a_subscriptions_queue_is_remembered_by_its_id():
    collection = mongomock.MongoClient().db[lay.SUBSCRIPTIONS]
    collection.insert_one({"_id": "b" * 32, lay.PROJECT: PROJECT, lay.QUEUE: "old"})
    queues = mongo_signals._SubscriptionQueues(collection)

    def resolve(e: dict[str, Any]) -> Any:
        return queues.resolve(e, translate(e))

    assert resolve(subscription_update("b" * 32)) == Signal(Change.SUBSCRIPTIONS, PROJECT,
                                                            "old")
    assert resolve(subscription_insert("c" * 32, "new")) == Signal(
        Change.SUBSCRIPTIONS, PROJECT, "new")
    assert resolve(subscription_delete("c" * 32)) == Signal(Change.SUBSCRIPTIONS, PROJECT,
                                                            "new")
    # Forgotten with its delete; an id never seen wakes every followed queue.
    assert resolve(subscription_delete("c" * 32)) == mongo_signals.EVERY_FOLLOWED
    assert resolve(message_insert()) == Signal(Change.MESSAGES, PROJECT, "q")


# Without change streams (mongomock here; a standalone mongod likewise)


def test_without_change_streams_listen_logs_once_and_waits(caplog):
    driver = Driver(MONGO.mock_client(), MONGO.new_database())
    received: list[Signal] = []

    async def main() -> None:
        for _ in range(3):  # as delayq.api.wakeups would, were it to return
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(driver.signals.listen(received.append), 0.3)

    with caplog.at_level(logging.INFO, logger=mongo_signals.__name__):
        asyncio.run(main())
    notes = [r for r in caplog.records if r.name == mongo_signals.__name__]
    assert len(notes) == 1 and notes[0].levelno == logging.WARNING
    assert "claim_wait_poll_interval" in notes[0].getMessage()
    assert "push_scan_interval" in notes[0].getMessage()
    assert received == []


def test_without_change_streams_a_waiter_sees_another_process_post_by_polling(make_conf):
    """Two drivers on one database stand for two processes: the app's waiter learns
    of the other's post on its poll interval."""
    database = MONGO.new_database()
    conf = make_conf()
    conf.set_override("message_store", "mongodb", group="drivers")
    conf.set_override("claim_wait_poll_interval", 0.2, group=WSGI_GROUP)
    from delayq.api.app import create_app

    client = project_client(create_app(conf, driver=Driver(MONGO.mock_client(), database)))
    other = Driver(MONGO.mock_client(), database)

    async def main() -> tuple[Any, float]:
        async with testing.ASGIConductor(client.app) as conductor:
            headers = {**PROJECT_HEADERS, "Client-ID": str(uuid.uuid4())}
            assert (await conductor.simulate_put("/v2/queues/q", headers=headers)
                    ).status_code == 201
            started = time.monotonic()
            waiting = asyncio.ensure_future(conductor.simulate_post(
                "/v2/queues/q/claims", headers=headers, params={"wait": 10}, json={}))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await other.messages.post(PROJECT_HEADERS["X-Project-ID"], "q", "elsewhere",
                                      [NewMessage({"from": "other"}, 60)])
            return await waiting, time.monotonic() - started

    resp, took = asyncio.run(main())
    assert resp.status_code == 201, resp.text
    assert [m["body"] for m in resp.json["messages"]] == [{"from": "other"}]
    assert took < 0.3 + 0.2 + 1.0  # its poll interval, with room for a slow machine


# The stream's thread, on a stand-in for pymongo's ChangeStream (its documented
# try_next, resume_token and context manager) over a mongomock database


class StandInStream:
    def __init__(self, events: queue.Queue, wait_ms: int) -> None:
        self.events = events
        self.wait = wait_ms / 1000
        self.resume_token: Any = None
        self.closed = threading.Event()
        self.alive = True

    def try_next(self) -> dict[str, Any] | None:
        try:
            item = self.events.get(timeout=self.wait)
        except queue.Empty:
            return None
        if isinstance(item, Exception):
            raise item
        if item["operationType"] == "invalidate":
            self.alive = False
        self.resume_token = item["_id"]
        return item

    def __enter__(self) -> StandInStream:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.closed.set()


class StandInDatabase:
    """A database whose ``watch`` answers as a replica set's would, or raises *refusal*."""

    def __init__(self, refusal: Exception | None = None) -> None:
        self.db = MONGO.mock_client()[MONGO.new_database()]
        self.events: queue.Queue = queue.Queue()
        self.refusal = refusal
        self.streams: list[StandInStream] = []
        self.resumed_after: list[Any] = []

    def __getitem__(self, name: str) -> Any:
        return self.db[name]

    def watch(self, pipeline: list[dict[str, Any]], *, max_await_time_ms: int,
              resume_after: Any = None) -> StandInStream:
        if self.refusal is not None:
            raise self.refusal
        self.resumed_after.append(resume_after)
        self.streams.append(StandInStream(self.events, max_await_time_ms))
        return self.streams[-1]


def stand_in_signals(database: StandInDatabase) -> mongo_signals.Signals:
    return mongo_signals.Signals(database, Offload())  # type: ignore[arg-type]


def test_the_streams_events_arrive_as_signals_and_cancelling_ends_its_thread():
    database = StandInDatabase()
    signals = stand_in_signals(database)
    doc = lay.new_message(PROJECT, "freed", 1, {}, 60, 0, "c", 1_000)
    database.db[lay.MESSAGES].insert_one(doc)
    signals.follow(PROJECT, "pushed")

    async def main() -> list[Signal]:
        received: list[Signal] = []
        task = asyncio.get_running_loop().create_task(signals.listen(received.append))
        release = message_update({lay.AVAILABLE: WHEN}, (lay.CLAIM, lay.CLAIM_EXPIRES),
                                 key={"_id": doc["_id"]})
        for e in (message_insert(queue="posted"), message_insert(queue="posted"),
                  release, subscription_delete("f" * 32), CLAIM):
            database.events.put({**e, "_id": {"_data": uuid.uuid4().hex}})
        for _ in range(100):
            await asyncio.sleep(0.02)
            if len(set(received)) >= 3:
                break
        started = time.monotonic()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert database.streams[0].closed.wait(1.0)
        assert time.monotonic() - started < mongo_signals.POLL_MS / 1000 + 0.5
        return received

    received = asyncio.run(main())
    # (The two posts' signals are one when the loop takes both at once: not guaranteed.)
    assert set(received) == {
        Signal(Change.MESSAGES, PROJECT, "posted"),
        Signal(Change.MESSAGES, PROJECT, "freed"),  # looked up by _id
        Signal(Change.SUBSCRIPTIONS, PROJECT, "pushed"),  # an unknown id: every followed
    }


def test_after_a_failure_listen_resumes_from_the_last_event():
    database = StandInDatabase()
    signals = stand_in_signals(database)
    seen = {**message_insert(), "_id": {"_data": "token-1"}}

    async def main() -> None:
        database.events.put(seen)
        database.events.put(pymongo.errors.OperationFailure("interrupted", code=11601))
        with pytest.raises(pymongo.errors.OperationFailure):
            await asyncio.wait_for(signals.listen(lambda signal: None), 2.0)
        database.events.put(pymongo.errors.OperationFailure("history lost", code=286))
        with pytest.raises(pymongo.errors.OperationFailure):
            await asyncio.wait_for(signals.listen(lambda signal: None), 2.0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(signals.listen(lambda signal: None), 0.2)

    asyncio.run(main())
    # Resumed after the event seen; after the token was lost, from now.
    assert database.resumed_after == [None, {"_data": "token-1"}, None]


def test_an_invalidated_stream_ends_listen_and_the_next_starts_anew():
    database = StandInDatabase()
    signals = stand_in_signals(database)

    async def main() -> None:
        database.events.put({**message_insert(), "_id": {"_data": "token-1"}})
        database.events.put({"_id": {"_data": "token-2"}, "operationType": "invalidate"})
        await asyncio.wait_for(signals.listen(lambda signal: None), 2.0)  # it returns
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(signals.listen(lambda signal: None), 0.2)

    asyncio.run(main())
    assert database.resumed_after == [None, None]


def test_a_standalone_servers_refusal_is_the_fallback(caplog):
    refusal = pymongo.errors.OperationFailure(
        "The $changeStream stage is only supported on replica sets", code=40573)
    signals = stand_in_signals(StandInDatabase(refusal))

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(signals.listen(lambda signal: None), 0.2)

    with caplog.at_level(logging.INFO, logger=mongo_signals.__name__):
        asyncio.run(main())
    notes = [r.getMessage() for r in caplog.records if r.name == mongo_signals.__name__]
    assert len(notes) == 1 and "only supported on replica sets" in notes[0]


# On a real replica set: every kind of write through one driver reaches another's listener


@pytest.fixture
def two_drivers() -> Iterator[tuple[Driver, Driver]]:
    if MONGO.real_uri() is None:
        pytest.skip(f"no real MongoDB: set {URI_VARIABLE}=mongodb://host:port/?replicaSet=rs0 "
                    "to run this against a replica set")
    database = MONGO.new_database()
    client = MONGO.real_client()
    yield Driver(client, database), Driver(client, database)


class Listener:
    """Runs a driver's ``listen`` and waits for given signals."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.received: asyncio.Queue[Signal] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(
            driver.signals.listen(self.received.put_nowait))

    async def expect(self, signal: Signal, within: float = 5.0) -> None:
        deadline = time.monotonic() + within
        while True:
            got = await asyncio.wait_for(self.received.get(), deadline - time.monotonic())
            if got == signal:
                return

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def post(driver: Driver, queue: str, delay: float = 0) -> str:
    [message_id] = await driver.messages.post(PROJECT, queue, "c",
                                              [NewMessage({"n": 1}, 600, delay)])
    return message_id


def test_each_write_through_one_driver_signals_the_other(two_drivers):
    """Each kind of write in a queue of its own, its signal awaited before the next
    write: one write, one signal, so each expected signal is that write's."""
    listening, writing = two_drivers

    def messages(queue: str) -> Signal:
        return Signal(Change.MESSAGES, PROJECT, queue)

    async def claim(queue: str, limit: int = 100, dead_letter: DeadLetterPolicy | None = None
                    ) -> Any:
        return await writing.claims.create(PROJECT, queue, ttl=60, grace=60, limit=limit,
                                           dead_letter=dead_letter)

    async def main() -> None:
        listener = Listener(listening)
        try:
            await until_listening(listener, writing)
            await post(writing, "released")
            await listener.expect(messages("released"))
            claimed = await claim("released")
            await writing.claims.release(PROJECT, "released", claimed.id)
            await listener.expect(messages("released"))

            await post(writing, "handed-back")
            await listener.expect(messages("handed-back"))
            claimed = await claim("handed-back")
            await writing.claims.release_message(PROJECT, "handed-back",
                                                 claimed.messages[0].id, claimed.id, 0)
            await listener.expect(messages("handed-back"))

            delayed = await post(writing, "edited", delay=300)
            await listener.expect(messages("edited"))
            await writing.messages.edit(PROJECT, "edited", delayed, delay=0)
            await listener.expect(messages("edited"))

            # Claimed once and released, the next claim moves it to the dead-letter queue.
            await post(writing, "source")
            await listener.expect(messages("source"))
            claimed = await claim("source")
            await writing.claims.release(PROJECT, "source", claimed.id)
            await listener.expect(messages("source"))
            assert await claim("source", dead_letter=DeadLetterPolicy(1, "dead")) is None
            await listener.expect(messages("dead"))
            await writing.messages.redrive(PROJECT, "dead", destination=None, limit=100)
            await listener.expect(messages("source"))

            subscriptions = Signal(Change.SUBSCRIPTIONS, PROJECT, "subscribed")
            sid = await writing.subscriptions.create(PROJECT, "subscribed",
                                                     "http://127.0.0.1:9/", 600, {})
            assert sid is not None
            await listener.expect(subscriptions)
            await writing.subscriptions.update(PROJECT, "subscribed", sid,
                                               SubscriptionChange(ttl=1200))
            await listener.expect(subscriptions)
            await writing.subscriptions.delete(PROJECT, "subscribed", sid)
            await listener.expect(subscriptions)
        finally:
            await listener.stop()
            await listening.close()
            await writing.close()

    asyncio.run(main())


def test_a_claim_alone_signals_nothing(two_drivers):
    listening, writing = two_drivers

    async def main() -> None:
        listener = Listener(listening)
        try:
            await until_listening(listener, writing)
            await post(writing, "q")
            await listener.expect(Signal(Change.MESSAGES, PROJECT, "q"))
            while not listener.received.empty():
                listener.received.get_nowait()
            await writing.claims.create(PROJECT, "q", ttl=60, grace=60, limit=100,
                                        dead_letter=None)
            await asyncio.sleep(1.0)
            assert listener.received.empty()
        finally:
            await listener.stop()
            await listening.close()
            await writing.close()

    asyncio.run(main())


async def until_listening(listener: Listener, writing: Driver) -> None:
    """Post until a signal arrives: the stream opens in its thread, after ``listen``
    starts, and sees only the writes made since."""
    for _ in range(50):
        await post(writing, "ready")
        try:
            await listener.expect(Signal(Change.MESSAGES, PROJECT, "ready"), 0.2)
        except TimeoutError:
            continue
        return
    pytest.fail("no signal of a post within 10 s")
