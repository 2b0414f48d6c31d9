"""How the MongoDB driver holds its quotas (``delayq/storage/mongo/quotas.py``), beyond
what the contract suite's bursts show: each check and the write it admits are one
transaction, so a write that fails stores nothing, a keyed post's key goes with its
messages, and only a creation that is admitted marks its project's document.

On mongomock, and on a real server too when DELAYQ_TEST_MONGODB_URI is set.
"""

from __future__ import annotations

from collections.abc import Iterator

import pymongo
import pymongo.errors
import pytest

from delayq.errors import QuotaExceeded
from delayq.idempotency import PostKey
from delayq.message import NewMessage
from delayq.storage.mongo.driver import Driver
from delayq.synchronous import Synchronous
from tests.contract.drivers import FakeClock
from tests.mongo_backend import MONGO

PROJECT = "proj"
CLIENT = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"


@pytest.fixture(params=["mongomock", "mongodb"])
def client(request) -> pymongo.MongoClient:
    if request.param == "mongomock":
        return MONGO.mock_client()
    if MONGO.real_uri() is None:
        pytest.skip("no real MongoDB: set DELAYQ_TEST_MONGODB_URI to run this against one")
    return MONGO.real_client()


@pytest.fixture
def database(client) -> Iterator[str]:
    name = MONGO.new_database()
    yield name
    client.drop_database(name)


@pytest.fixture
def driver(client, database) -> Iterator[Driver]:
    # Far ahead of the real time: no TTL monitor drops what a test stores.
    drv = Synchronous(Driver(client, database, clock=FakeClock(4_000_000_000.0)))
    yield drv
    drv.close()


def post(driver: Driver, queue: str, count: int, **quotas) -> list[str]:
    return driver.messages.post(PROJECT, queue, CLIENT, [NewMessage("x", 3600, 0)] * count,
                                **quotas)


def test_the_projects_collection_exists_before_any_transaction_writes_to_it(
        driver, client, database):
    # A transaction may not create it on servers before 4.4 (nor across shards).
    assert "projects" in client[database].list_collection_names()


def test_a_post_whose_insert_fails_under_a_quota_leaves_no_queue(driver, client, database,
                                                                 monkeypatch):
    collection = type(client[database].messages)
    real_insert = collection.insert_many

    def failing(coll, documents, *args, **kwargs):
        if coll.name == "messages":
            raise pymongo.errors.OperationFailure("the insert failed")
        return real_insert(coll, documents, *args, **kwargs)

    monkeypatch.setattr(collection, "insert_many", failing)
    with pytest.raises(pymongo.errors.OperationFailure):
        post(driver, "new", 2, message_quota=10, queue_quota=5)
    monkeypatch.undo()
    # The queue the post created and the positions it reserved went with the messages.
    assert driver.queues.get(PROJECT, "new") is None
    assert client[database].queues.count_documents({}) == 0
    assert len(post(driver, "new", 2, message_quota=10, queue_quota=5)) == 2
    assert client[database].queues.find_one({"q": "new"})["k"] == 2


def test_a_keyed_post_past_the_message_quota_keeps_neither_key_nor_messages(
        driver, client, database):
    key = PostKey("k-1", "digest", 60)
    post(driver, "q", 2)
    with pytest.raises(QuotaExceeded, match="holds 2 messages; 2 more"):
        post(driver, "q", 2, message_quota=3, key=key)
    assert client[database].post_keys.count_documents({}) == 0
    assert driver.queues.stats(PROJECT, "q").total == 2
    assert len(post(driver, "q", 1, message_quota=3, key=key)) == 1
    assert client[database].post_keys.count_documents({}) == 1


def test_each_admitted_creation_and_only_it_marks_the_projects_document(driver, client, database):
    projects = client[database].projects
    assert driver.queues.create(PROJECT, "a", {}, queue_quota=2)
    assert projects.find_one({"_id": PROJECT})["v"] == 1
    post(driver, "b", 1, queue_quota=2)
    assert projects.find_one({"_id": PROJECT})["v"] == 2
    # Refused (its transaction aborted), or the queue exists: nothing committed.
    with pytest.raises(QuotaExceeded):
        driver.queues.create(PROJECT, "c", {}, queue_quota=2)
    with pytest.raises(QuotaExceeded):
        post(driver, "c", 1, queue_quota=2)
    assert not driver.queues.create(PROJECT, "a", {}, queue_quota=2)
    post(driver, "a", 1, queue_quota=2)
    assert projects.find_one({"_id": PROJECT})["v"] == 2


def test_a_redrive_past_the_queue_quota_moves_nothing_and_creates_nothing(driver, client,
                                                                         database):
    post(driver, "dlq", 3)
    with pytest.raises(QuotaExceeded, match="already has 1 queue:"):
        driver.messages.redrive(PROJECT, "dlq", destination="elsewhere", limit=3, queue_quota=1)
    assert driver.queues.stats(PROJECT, "dlq").total == 3
    assert client[database].queues.count_documents({"q": "elsewhere"}) == 0
    assert driver.messages.redrive(PROJECT, "dlq", destination="elsewhere", limit=3,
                          queue_quota=2) == 3
