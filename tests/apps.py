"""The app under test, in process: its configuration and an HTTP client on each driver."""

from __future__ import annotations

import uuid
from pathlib import Path

from falcon import testing
from oslo_config import cfg

from delayq import conf as delayq_conf
from delayq.api.app import create_app
from delayq.metrics import Metrics
from delayq.synchronous import Synchronous


def sqlite_conf(directory: Path, **transport: object) -> cfg.ConfigOpts:
    """A parsed configuration on a SQLite file in *directory*.

    Keyword arguments override ``[transport]`` options, e.g. ``max_message_delay=5``.
    """
    conf = delayq_conf.load([])
    conf.set_override("path", str(directory / "delayq.sqlite"),
                      group="drivers:message_store:sqlite")
    # The in-process apps serve requests, not webhooks: tests of pushing turn it on.
    conf.set_override("push", False, group="notification")
    for name, value in transport.items():
        conf.set_override(name, value, group="transport")
    return conf


#: The drivers the in-process HTTP tests run on.
HTTP_DRIVERS = ["sqlite", "redis", "mongodb", "swift"]

#: The project of the in-process clients' requests that name none themselves: without
#: authentication every request to a project's route names one (X-Project-ID).
PROJECT = "tests"
PROJECT_HEADERS = {"X-Project-ID": PROJECT}


def project_client(app: object) -> testing.TestClient:
    """An in-process client of *app* whose requests carry ``PROJECT_HEADERS`` unless
    they send an X-Project-ID of their own."""
    return testing.TestClient(app, headers=PROJECT_HEADERS)


def http_client(name: str, conf: cfg.ConfigOpts) -> testing.TestClient:
    """An in-process HTTP client of the app on a fresh store of driver *name*.

    *conf* comes from ``sqlite_conf``; the other drivers' options are set on it.
    ``redis`` is a real redis-server (tests/redis_servers.py), its keys under a namespace
    of their own; ``mongodb`` is a database of its own on the MongoDB named by
    DELAYQ_TEST_MONGODB_URI, or on mongomock without one (tests/mongo_backend.py);
    ``swift`` a real Swift on loopback (tests/swift_server.py), containers under a
    prefix of their own.
    """
    driver = None
    metrics = Metrics()
    if name == "redis":
        from tests.redis_servers import SERVERS

        group = "drivers:message_store:redis"
        conf.set_override("message_store", "redis", group="drivers")
        conf.set_override("uri", SERVERS.single().uri, group=group)
        conf.set_override("namespace", f"t{uuid.uuid4().hex[:12]}", group=group)
        conf.set_override("reap_interval", 0, group=group)
    if name == "mongodb":
        from delayq.storage.mongo.driver import Driver as MongoDriver
        from tests.mongo_backend import MONGO

        conf.set_override("message_store", "mongodb", group="drivers")
        real = MONGO.real_uri() is not None
        driver = Synchronous(MongoDriver(MONGO.real_client() if real else MONGO.mock_client(),
                             MONGO.new_database(), endings=metrics.count_endings))
    if name == "swift":
        from tests.swift_server import SWIFT

        group = "drivers:message_store:swift"
        auth = SWIFT.auth()
        conf.set_override("message_store", "swift", group="drivers")
        conf.set_override("auth_url", auth.auth_url, group=group)
        conf.set_override("user", auth.user, group=group)
        conf.set_override("key", auth.key, group=group)
        conf.set_override("container_prefix", f"t{uuid.uuid4().hex[:12]}", group=group)
        # Tests that want a reaper pass call the driver's reap themselves.
        conf.set_override("reap_interval", 0, group=group)
    return project_client(create_app(conf, driver=None if driver is None else driver.target,
                                     metrics=metrics))
