"""Fixtures shared by every test module."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from falcon import testing
from oslo_config import cfg

from delayq import conf as delayq_conf
from delayq.api.app import create_app


@pytest.fixture
def make_conf(tmp_path) -> Callable[..., cfg.ConfigOpts]:
    """A factory of parsed configurations on a fresh SQLite file in tmp_path.

    Keyword arguments override ``[transport]`` options, e.g. ``max_message_delay=5``.
    """

    def make(**transport: object) -> cfg.ConfigOpts:
        conf = delayq_conf.load([])
        conf.set_override("path", str(tmp_path / "delayq.sqlite"),
                          group="drivers:message_store:sqlite")
        for name, value in transport.items():
            conf.set_override(name, value, group="transport")
        return conf

    return make


@pytest.fixture(params=["sqlite", "redis", "mongodb", "swift"])
def client(request, make_conf) -> testing.TestClient:
    """An in-process HTTP client of the app on a fresh store of each driver.

    ``redis`` is a real redis-server (tests/redis_servers.py), its keys under a namespace
    of this test's own; ``mongodb`` is a database of this test's own on the MongoDB named
    by DELAYQ_TEST_MONGODB_URI, or on mongomock without one (tests/mongo_backend.py);
    ``swift`` a real Swift on loopback (tests/swift_server.py), containers under a prefix
    of this test's own.
    """
    conf = make_conf()
    driver = None
    if request.param == "redis":
        from tests.redis_servers import SERVERS

        group = "drivers:message_store:redis"
        conf.set_override("message_store", "redis", group="drivers")
        conf.set_override("uri", SERVERS.single().uri, group=group)
        conf.set_override("namespace", f"t{uuid.uuid4().hex[:12]}", group=group)
        conf.set_override("reap_interval", 0, group=group)
    if request.param == "mongodb":
        from delayq.storage.mongo.driver import Driver as MongoDriver
        from tests.mongo_backend import MONGO

        conf.set_override("message_store", "mongodb", group="drivers")
        real = MONGO.real_uri() is not None
        driver = MongoDriver(MONGO.real_client() if real else MONGO.mock_client(),
                             MONGO.new_database())
    if request.param == "swift":
        from tests.swift_server import SWIFT

        group = "drivers:message_store:swift"
        auth = SWIFT.auth()
        conf.set_override("message_store", "swift", group="drivers")
        conf.set_override("auth_url", auth.auth_url, group=group)
        conf.set_override("user", auth.user, group=group)
        conf.set_override("key", auth.key, group=group)
        conf.set_override("container_prefix", f"t{uuid.uuid4().hex[:12]}", group=group)
    app = create_app(conf, driver=driver)
    yield testing.TestClient(app)


@pytest.fixture
def headers() -> dict[str, str]:
    """Headers of one client in one project."""
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "project-a"}


def pytest_sessionfinish(session, exitstatus) -> None:
    """Stop the Redis servers and the Swift the tests started; drop their MongoDB databases."""
    from tests.mongo_backend import MONGO
    from tests.redis_servers import SERVERS
    from tests.swift_server import SWIFT

    SERVERS.stop_all()
    SWIFT.stop_all()
    MONGO.drop_all()
