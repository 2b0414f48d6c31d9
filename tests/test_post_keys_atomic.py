"""A keyed post that the store refuses part way keeps neither its key nor any message:
the key and the messages are written in one atomic step (SQLite's transaction, MongoDB's
transaction), so a repeat of the post stores it whole.

The store itself refuses the write (a trigger, a unique index added by the test), as it
would on a full disk or a failover: nothing of delayq is replaced.
"""

from __future__ import annotations

import sqlite3

import pymongo
import pytest

from delayq.broker import Broker
from delayq.idempotency import PostKey
from delayq.synchronous import Synchronous
from delayq.validation import Limits, PostedMessage
from tests.contract.drivers import FakeClock, open_driver
from tests.contract.drivers import _mongomock as mongomock_spec
from tests.contract.drivers import _sqlite as sqlite_spec

PROJECT = "atomic"
KEY = PostKey("order-1", "f" * 64, 300)
MESSAGES = [PostedMessage("first", None, None), PostedMessage("poison", None, None)]


def stored(broker: Broker) -> list:
    messages, _ = broker.list_messages(PROJECT, "q", client_id="c", marker=None, limit=20,
                                       echo=True, include_claimed=True,
                                       include_delayed=True)
    return [m.body for m in messages]


def refused_then_repeated(broker: Broker, refusal: type[Exception], lift) -> None:
    with pytest.raises(refusal):
        broker.post(PROJECT, "q", "c", MESSAGES, size=0, key=KEY)
    assert stored(broker) == []
    lift()
    ids = broker.post(PROJECT, "q", "c", MESSAGES, size=0, key=KEY)
    assert stored(broker) == ["first", "poison"]
    assert broker.post(PROJECT, "q", "c", MESSAGES, size=0, key=KEY) == ids


def test_sqlite(tmp_path):
    spec = sqlite_spec(tmp_path)
    driver = Synchronous(open_driver(spec, FakeClock()))
    db = sqlite3.connect(spec.options["path"])
    db.execute("CREATE TRIGGER poison BEFORE INSERT ON messages WHEN NEW.body = '\"poison\"' "
               "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    db.commit()

    def lift() -> None:
        db.execute("DROP TRIGGER poison")
        db.commit()

    try:
        refused_then_repeated(Synchronous(Broker(driver.target, Limits())),
                              sqlite3.IntegrityError, lift)
    finally:
        db.close()
        driver.close()


def test_mongodb(tmp_path):
    from tests.mongo_backend import MONGO

    spec = mongomock_spec(tmp_path)
    driver = Synchronous(open_driver(spec, FakeClock()))
    messages = MONGO.mock_client()[spec.options["database"]]["messages"]
    messages.create_index([("b", pymongo.ASCENDING)], name="poison", unique=True)
    messages.insert_one({"b": '"poison"', "p": "elsewhere"})

    def lift() -> None:
        messages.delete_many({"p": "elsewhere"})

    try:
        refused_then_repeated(Synchronous(Broker(driver.target, Limits())),
                              pymongo.errors.PyMongoError, lift)
    finally:
        driver.close()
