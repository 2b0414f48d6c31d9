"""The MongoDB backends of the tests: mongomock in this process, or a real server.

No MongoDB server can be installed by the test command, so the contract suite runs the
driver on mongomock, with the driver's own code path (the same pymongo calls, filters and
bulk writes a server receives). Set ``DELAYQ_TEST_MONGODB_URI`` to a replica set, e.g.
``mongodb://127.0.0.1:27017/?replicaSet=rs0``, and the same suite also runs against it,
each test in a database of its own (``delayq_test_*``, dropped at the end of the session).

mongomock is made to keep three promises of a real server that the driver relies on:

1. A write to a document is atomic: MongoDB matches a document against an update's
   filter and modifies it as one step, so of two updates filtered on the same state only
   one applies. mongomock matches and then modifies in separate Python steps, so threads
   could both apply; one lock around each mongomock collection operation restores the
   server's guarantee (coarser than a server's, never weaker).
2. pymongo 4.11 and later pass ``UpdateOne``'s ``sort`` argument to bulk writes, which
   mongomock 4.3 does not accept; an unset one is dropped.
3. A transaction (``session.with_transaction``) commits whole or not at all, and no
   other operation sees it half done. mongomock has no sessions; here a session's
   transaction runs its callback holding the lock of promise 1 (so nothing runs beside
   it), and puts back the documents of every collection it operated on as they were
   when the callback raises. Operations ignore the session they are given.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import threading
import time
import uuid
from collections.abc import Iterator

import mongomock
import mongomock.collection
import pymongo

URI_VARIABLE = "DELAYQ_TEST_MONGODB_URI"
DATABASE_PREFIX = "delayq_test_"

_LOCK = threading.RLock()
_ATOMIC = ("insert_one", "insert_many", "update_one", "update_many", "replace_one",
           "delete_one", "delete_many", "find_one_and_update", "find_one_and_delete",
           "find_one_and_replace", "bulk_write", "count_documents", "create_indexes",
           "create_index", "aggregate", "distinct")


# The documents of each collection the running transaction has operated on, as they
# were before its first operation (id of the collection's store -> (store, documents));
# None outside one.
# Only the thread holding _LOCK reads or changes it. A transaction copies only what it
# touches: the session's one mongomock client holds every test's databases.
_before_transaction: dict[int, tuple[object, object]] | None = None


def _atomic(method):
    @functools.wraps(method)
    def locked(*args, session=None, **kwargs):
        with _LOCK:
            return method(*args, **kwargs)

    return locked


def _atomic_on_collection(method):
    """*method* of a collection, under the lock, its documents kept first when it is
    the running transaction's first operation on that collection."""
    @functools.wraps(method)
    def locked(collection, *args, session=None, **kwargs):
        with _LOCK:
            kept = _before_transaction
            if kept is not None:
                store = collection._store  # its documents; the Collection is a view
                if id(store) not in kept:
                    kept[id(store)] = (store, copy.deepcopy(store._documents))
            return method(collection, *args, **kwargs)

    return locked


class _Session:
    """A mongomock client's session: transactions as promise 3 says."""

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    def with_transaction(self, callback, **options):
        global _before_transaction
        with _LOCK:
            if _before_transaction is not None:  # within another: part of it
                return callback(self)
            _before_transaction = {}
            try:
                return callback(self)
            except BaseException:
                for store, documents in _before_transaction.values():
                    store._documents = documents
                raise
            finally:
                _before_transaction = None


def _accept_unset_sort(add_update):
    @functools.wraps(add_update)
    def accepting(self, *args, sort=None, **kwargs):
        if sort is not None:
            raise NotImplementedError("mongomock: UpdateOne(sort=...)")
        return add_update(self, *args, **kwargs)

    return accepting


def _patch_mongomock() -> None:
    collection = mongomock.collection.Collection
    if getattr(collection, "_delayq_atomic", False):
        return
    for name in _ATOMIC:
        setattr(collection, name, _atomic_on_collection(getattr(collection, name)))
    cursor = mongomock.collection.Cursor
    cursor._compute_results = _atomic(cursor._compute_results)
    builder = mongomock.collection.BulkOperationBuilder
    builder.add_update = _accept_unset_sort(builder.add_update)
    mongomock.MongoClient.start_session = lambda client, **options: _Session()
    collection._delayq_atomic = True


@contextlib.contextmanager
def mongomock_stalled(seconds: float) -> Iterator[None]:
    """Every mongomock operation of the process waits for *seconds* from now, as an
    overloaded server's would (a thread holds the lock of promise 1 so long)."""
    taken = threading.Event()

    def hold() -> None:
        with _LOCK:
            taken.set()
            time.sleep(seconds)
    holder = threading.Thread(target=hold, name="mongomock-stall")
    holder.start()
    taken.wait()
    try:
        yield
    finally:
        holder.join()


class MongoBackends:
    """One mongomock client for the session, and the real server when configured."""

    def __init__(self) -> None:
        self._mock: mongomock.MongoClient | None = None
        self._real: pymongo.MongoClient | None = None
        self._databases: set[str] = set()

    @staticmethod
    def real_uri() -> str | None:
        return os.environ.get(URI_VARIABLE) or None

    def mock_client(self) -> mongomock.MongoClient:
        if self._mock is None:
            _patch_mongomock()
            self._mock = mongomock.MongoClient()
        return self._mock

    def real_client(self) -> pymongo.MongoClient:
        if self._real is None:
            from delayq.storage.mongo.client import make_client

            self._real = make_client(self.real_uri())
        return self._real

    def new_database(self) -> str:
        """A database name no other test uses (dropped by ``drop_all`` on the server)."""
        name = f"{DATABASE_PREFIX}{uuid.uuid4().hex[:12]}"
        self._databases.add(name)
        return name

    def drop_all(self) -> None:
        if self._real is not None:
            for name in self._databases:
                self._real.drop_database(name)
            self._real.close()
            self._real = None
        self._databases.clear()
        self._mock = None


MONGO = MongoBackends()
