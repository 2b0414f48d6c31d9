"""Fixtures of the storage contract suite: each test runs once per driver."""

from __future__ import annotations

import uuid

import pytest

from delayq.broker import Broker
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.drivers import DRIVERS, DriverSpec, FakeClock, open_driver


@pytest.fixture(params=sorted(DRIVERS))
def spec(request, tmp_path) -> DriverSpec:
    return DRIVERS[request.param](tmp_path)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def driver(spec, clock):
    drv = Synchronous(open_driver(spec, clock))
    yield drv
    drv.close()


@pytest.fixture
def broker(driver) -> Broker:
    """The broker with Zaqar's default limits over the driver on the fake clock."""
    return Synchronous(Broker(driver.target, Limits()))


@pytest.fixture
def live_broker(spec):
    """The broker over the driver on the real clock, for tests across processes."""
    drv = Synchronous(open_driver(spec))
    yield Synchronous(Broker(drv.target, Limits()))
    drv.close()


@pytest.fixture
def client_id() -> str:
    return str(uuid.uuid4())
