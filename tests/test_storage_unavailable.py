"""A 503 names its store and says nothing of where it is or how it failed; the server's
log gets that, at WARNING.

For each driver the store is made really unavailable — a SQLite database locked by
another writer, or gone from under the workers' threads; a redis-server stopped; a real
pymongo client on a port nothing listens on; Swift behind an auth URL nothing listens
on — and the API's answers (``/v2/ping`` and ``/v2/health`` too) are read in process.
"""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest
from falcon import testing
from swiftclient.client import Connection

from delayq.api.app import create_app
from delayq.conf import WSGI_GROUP
from delayq.storage.mongo.client import make_client
from delayq.storage.mongo.driver import Driver as MongoDriver
from delayq.storage.swift.driver import Driver as SwiftDriver
from delayq.synchronous import Synchronous
from tests.redis_servers import SERVERS
from tests.server import free_port

HEADERS = {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "p"}
SQLITE_GROUP = "drivers:message_store:sqlite"
REDIS_GROUP = "drivers:message_store:redis"
# What a traceback or a Lua error would show.
INTERNALS = ("Traceback", 'File "', "user_script", "Error 111", "Errno")

POST = ("POST", "/v2/queues/q/messages", {"messages": [{"body": 1}]})
CLAIM = ("POST", "/v2/queues/q/claims", {"ttl": 60, "grace": 60})
STATS = ("GET", "/v2/queues/q/stats", None)
PURGE = ("POST", "/v2/queues/q/purge", {})
DELETE = ("DELETE", "/v2/queues/q", None)


def public(store: str) -> dict[str, str]:
    return {"title": "Service temporarily unavailable",
            "description": f"The message store ({store}) is temporarily unavailable; "
                           "retry the request later."}


def assert_503s(client: testing.TestClient, store: str, requests: Iterable[tuple],
                private: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """Each request answers 503 with the public text alone; the log has *private*."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="delayq.api.errors"):
        for method, path, body in requests:
            response = client.simulate_request(method, path, headers=HEADERS, json=body)
            assert response.status_code == 503, (method, path, response.text)
            assert response.json == public(store), (method, path)
            for text in [*private, *INTERNALS]:
                assert text not in response.text, (method, path, text)
    logged = [r.getMessage() for r in caplog.records
              if r.name == "delayq.api.errors" and r.levelno == logging.WARNING]
    assert len(logged) == len(list(requests)), logged
    for line in logged:
        assert line.startswith(f"The {store} message store is unavailable ("), line
        for text in private:
            assert text in line, (text, line)


def assert_down(client: testing.TestClient, store: str) -> None:
    """``/v2/ping`` answers 503 with no body, ``/v2/health`` says which store is down."""
    ping = client.simulate_get("/v2/ping")
    assert (ping.status_code, ping.content) == (503, b"")
    health = client.simulate_get("/v2/health")
    assert health.status_code == 503
    assert health.json == {"storage_reachable": False, "message_store": store,
                           "operation_status": {}}


# SQLite


def sqlite_client(make_conf, path: Path, **wsgi: object) -> testing.TestClient:
    conf = make_conf()
    conf.set_override("path", str(path), group=SQLITE_GROUP)
    conf.set_override("busy_timeout", 50, group=SQLITE_GROUP)
    for name, value in wsgi.items():
        conf.set_override(name, value, group=WSGI_GROUP)
    return testing.TestClient(create_app(conf))


def test_a_locked_sqlite_database_answers_503_naming_only_sqlite(make_conf, tmp_path,
                                                                  caplog):
    path = tmp_path / "store" / "delayq.sqlite"
    path.parent.mkdir()
    client = sqlite_client(make_conf, path)
    assert client.simulate_put("/v2/queues/q", headers=HEADERS, json={}).status_code == 201
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process's write, holding the lock
    try:
        assert_503s(client, "sqlite", [POST, CLAIM, PURGE, DELETE],
                    [str(path), "database is locked"], caplog)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert client.simulate_request(*POST[:2], headers=HEADERS, json=POST[2]).status_code == 201


def test_an_unopenable_sqlite_database_answers_503_naming_only_sqlite(make_conf, tmp_path,
                                                                      caplog):
    path = tmp_path / "store" / "delayq.sqlite"
    path.parent.mkdir()
    # In threads, each opens its connection at its first call: after the move below.
    client = sqlite_client(make_conf, path, storage_calls="threads")
    path.parent.rename(tmp_path / "moved")
    assert_503s(client, "sqlite", [POST, STATS, DELETE],
                [str(path), "unable to open database file"], caplog)
    assert_down(client, "sqlite")


# Redis


def test_a_stopped_redis_answers_503_naming_only_redis(make_conf, caplog):
    server = SERVERS.fresh()
    conf = make_conf()
    conf.set_override("message_store", "redis", group="drivers")
    conf.set_override("uri", server.uri, group=REDIS_GROUP)
    conf.set_override("namespace", f"t{uuid.uuid4().hex[:12]}", group=REDIS_GROUP)
    client = testing.TestClient(create_app(conf))
    assert client.simulate_put("/v2/queues/q", headers=HEADERS, json={}).status_code == 201
    server.stop()
    assert_503s(client, "redis", [POST, CLAIM, STATS, PURGE, DELETE],
                [f"127.0.0.1:{server.port}"], caplog)
    assert_down(client, "redis")


# MongoDB


def test_an_unreachable_mongodb_answers_503_naming_only_mongodb(make_conf, caplog):
    port = free_port()
    mongo = make_client(f"mongodb://127.0.0.1:{port}/", server_selection_timeout=0.3,
                        connect_timeout=0.3)
    with caplog.at_level(logging.WARNING):
        driver = Synchronous(MongoDriver(mongo, "delayq_unreachable"))
    client = testing.TestClient(create_app(make_conf(), driver=driver.target))
    try:
        assert_503s(client, "mongodb", [POST, CLAIM, STATS, DELETE],
                    [f"127.0.0.1:{port}", "Topology"], caplog)
        assert_down(client, "mongodb")
    finally:
        mongo.close()


# Swift


def test_an_unreachable_swift_answers_503_naming_only_swift(make_conf, caplog):
    port = free_port()
    auth_url = f"http://127.0.0.1:{port}/auth/v1.0"
    driver = Synchronous(SwiftDriver(lambda: Connection(authurl=auth_url, user="test:tester",
                                            key="testing", retries=0, timeout=5),
                         prefix="down"))
    client = testing.TestClient(create_app(make_conf(), driver=driver.target))
    try:
        assert_503s(client, "swift", [POST, CLAIM, STATS],
                    [f"port={port}", "/auth/v1.0"], caplog)
        assert_down(client, "swift")
    finally:
        driver.close()
