"""Fixtures of the Swift-only test modules (test_swift_*.py), a plugin of
tests/conftest.py: drivers and a plain connection on tests/swift_server.py's Swift, each
test under a container prefix of its own. Swift starts at the first test that uses one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from swiftclient.client import Connection

from delayq.storage.swift.driver import Driver
from delayq.synchronous import Synchronous
from tests.swift_server import SWIFT


def connector(auth_url: str, user: str, key: str,
              wrap: Callable[[Connection], Any] | None = None) -> Callable[[], Any]:
    def connect() -> Any:
        conn = Connection(authurl=auth_url, user=user, key=key, retries=0, timeout=30)
        return wrap(conn) if wrap else conn

    return connect


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw() -> Iterator[Connection]:
    """A plain swiftclient connection to the test account, to look at the objects."""
    auth = SWIFT.auth()
    conn = Connection(auth.auth_url, auth.user, auth.key, retries=0)
    yield conn
    conn.close()


@pytest.fixture
def make_driver(prefix) -> Iterator[Callable[..., Driver]]:
    """Drivers on the test account under this test's prefix; closed after the test."""
    opened: list[Driver] = []

    def make(*, clock: Callable[[], float] | None = None,
             wrap: Callable[[Connection], Any] | None = None, apart: bool = False,
             **options: Any) -> Driver:
        """*apart*: under a prefix of its own, sharing nothing with the test's others."""
        auth = SWIFT.auth()
        driver = Synchronous(Driver(connector(auth.auth_url, auth.user, auth.key, wrap),
                        prefix=f"{prefix}x{len(opened)}" if apart else prefix, clock=clock,
                        **options))
        opened.append(driver)
        return driver

    yield make
    for driver in opened:
        driver.close()
