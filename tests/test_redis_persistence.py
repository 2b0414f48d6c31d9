"""The Redis driver warns, when it connects, about server settings that lose acknowledged
writes — read from real redis-servers, set as an operator would set them."""

from __future__ import annotations

import logging
import uuid

import pytest
import redis

from delayq.message import NewMessage
from delayq.storage.redis import persistence
from delayq.storage.redis.driver import Driver
from delayq.synchronous import Synchronous
from tests.redis_servers import SERVERS

LOGGER = persistence.LOG.name


@pytest.fixture(scope="module")
def server():
    """A Redis of this module's own: the tests change its persistence settings."""
    return SERVERS.fresh()


def warnings_on_connect(uri: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The persistence warnings a driver logs when it connects to *uri*."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        driver = Synchronous(Driver(uri, namespace=f"t{uuid.uuid4().hex[:12]}"))
        driver.close()
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING]


@pytest.mark.parametrize(("settings", "expected"), [
    ({"appendonly": "no", "maxmemory-policy": "noeviction"}, ["appendonly is not yes"]),
    ({"appendonly": "yes", "appendfsync": "everysec", "maxmemory-policy": "noeviction"},
     ["appendfsync is everysec, not always"]),
    ({"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "allkeys-lru"},
     ["maxmemory-policy is allkeys-lru, not noeviction"]),
    ({"appendonly": "no", "maxmemory-policy": "volatile-ttl"},
     ["appendonly is not yes", "maxmemory-policy is volatile-ttl, not noeviction"]),
    ({"appendonly": "yes", "appendfsync": "always", "maxmemory-policy": "noeviction"}, []),
])
def test_each_risky_setting_is_named_once(server, caplog, settings, expected):
    client = redis.Redis(port=server.port)
    for name, value in settings.items():
        client.config_set(name, value)
    client.close()
    logged = warnings_on_connect(server.uri, caplog)
    assert len(logged) == len(expected), logged
    for message, phrase in zip(logged, expected, strict=True):
        assert f"127.0.0.1:{server.port}" in message and phrase in message, message


def test_every_cluster_primary_is_checked(caplog):
    uri = SERVERS.cluster_uri()
    logged = warnings_on_connect(uri, caplog)
    # The suite's cluster nodes run without an AOF: each of the 3 primaries says so.
    addresses = {m.split(": ", 1)[0] for m in logged if "appendonly is not yes" in m}
    assert len(addresses) == 3, logged


def test_a_server_without_config_is_served_all_the_same(caplog):
    """Managed services often disable CONFIG: nothing can be checked, nothing fails."""
    locked = SERVERS.fresh("--rename-command", "CONFIG", "")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        driver = Synchronous(Driver(locked.uri, namespace=f"t{uuid.uuid4().hex[:12]}"))
        driver.queues.create("p", "q", {})
        [message_id] = driver.messages.post("p", "q", "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a",
                                            [NewMessage("kept", 60, 0)])
        [message] = driver.messages.get("p", "q", [message_id])
        assert message.body == "kept"
        driver.close()
    records = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in records] == [logging.INFO], records
    assert "Could not read the persistence settings" in records[0].getMessage()
