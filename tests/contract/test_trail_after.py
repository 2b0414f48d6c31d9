"""The audits' incremental read of a trail (``Trail.events(..., after=t)``), on every
driver: exactly the events whose time is strictly greater than ``t``, oldest first, read
from where the backend keeps them rather than filtered from the whole trail.

The times asked about are the ones the trail hands back (a backend stores them to its
own precision: MongoDB's to the millisecond), and the events expected are the whole
trail's filtered here, so one rule holds on every driver.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from itertools import pairwise

import pytest
from swiftclient.client import Connection

from delayq import events
from delayq.broker import Broker
from delayq.events import Event, event_row
from delayq.storage.sqlite import sql
from delayq.storage.swift import layout as swift_layout
from delayq.synchronous import Synchronous
from delayq.validation import Limits
from tests.contract.drivers import DRIVERS, open_driver
from tests.contract.helpers import PROJECT, batch_rows, create, post

ONE_US = 1e-6
# A stream entry id far before any event a test writes now (``lua/common.lua``, "Event
# trail"): only a read of the stream from its start sees it.
ANCIENT_ID = "1-0"
FAR_FUTURE_US = 10**18
EXPLAIN = "EXPLAIN QUERY PLAN "
DROP_TIME_INDEX = "DROP INDEX events_queue_time"  # as a store made before it lacks it


def trail(driver, queue: str, after: float | None = None) -> list[Event]:
    return list(driver.trail.events(PROJECT, queue, after=after))


def afters(times: list[float]) -> list[float]:
    """Instants to read after: before all events, at each event's exact time and a
    microsecond either side of it, between two events, and after all."""
    between = [(earlier + later) / 2 for earlier, later in pairwise(times)]
    around = [t + step for t in times for step in (-ONE_US, 0.0, ONE_US)]
    return [times[0] - 100, *around, *between, times[-1] + 100]


def check_reads_after(driver, queue: str) -> list[Event]:
    """Check every read after an instant of *queue*'s trail against the whole trail;
    returns the whole trail."""
    whole = trail(driver, queue)
    assert whole, "no events to read after"
    assert trail(driver, queue, after=None) == whole
    for after in afters([event.time for event in whole]):
        read = trail(driver, queue, after=after)
        assert read == [event for event in whole if event.time > after], after
        rows = list(driver.trail.event_rows(PROJECT, queue, after=after))
        assert rows == [event_row(event) for event in read], after
        assert batch_rows(driver, queue, after) == rows, after
    return whole


def test_a_read_after_an_instant_has_exactly_the_later_events(broker, driver, clock):
    create(broker, "q")
    post(broker, "q", "first")
    clock.advance(1)
    post(broker, "q", "second", "third")  # two events at one instant
    clock.advance(ONE_US)
    post(broker, "q", "a microsecond later")
    clock.advance(5.5)
    post(broker, "q", "last")
    whole = check_reads_after(driver, "q")
    assert [event.time for event in whole] == sorted(event.time for event in whole)
    last = whole[-1].time
    assert trail(driver, "q", after=last) == []
    assert trail(driver, "q", after=last - ONE_US) == [whole[-1]]


def test_a_read_after_an_instant_on_the_store_s_own_clock(live_broker, spec):
    """The backend's clock (Redis's TIME, which also names its stream entries, Swift's
    proxy, MongoDB's primary) rather than a given one."""
    create(live_broker, "q")
    for body in ("first", "second", "third"):
        post(live_broker, "q", body)
        time.sleep(0.01)  # apart on every backend's clock, MongoDB's milliseconds too
    check_reads_after(live_broker.driver, "q")


def test_a_read_after_an_instant_on_redis_skips_the_stream_before_it(tmp_path):
    """Entries with ids well before the instant are not read, whatever their time."""
    driver = Synchronous(open_driver(DRIVERS["redis"](tmp_path)))
    try:
        client = driver.trail.connection.blocking()
        key = driver.trail.key_names.trail(PROJECT, "q")
        # An event whose time is after any instant read after, stored before them all.
        client.xadd(key, {"k": "posted", "t": str(FAR_FUTURE_US)}, id=ANCIENT_ID)
        broker = Synchronous(Broker(driver.target, Limits()))
        create(broker, "q")
        before = time.time() - 1  # the server's clock may lag this host's a little
        post(broker, "q", "now")
        ancient, *recent = trail(driver, "q")
        assert ancient.time == FAR_FUTURE_US / 1e6
        assert [event.kind for event in recent] == [events.POSTED]
        assert trail(driver, "q", after=before) == recent
    finally:
        driver.close()


def test_a_read_after_an_instant_on_swift_skips_the_objects_named_before_it(tmp_path):
    """Event objects named well before the instant are not listed, whatever they hold."""
    spec = DRIVERS["swift"](tmp_path)
    driver = Synchronous(open_driver(spec))
    try:
        broker = Synchronous(Broker(driver.target, Limits()))
        create(broker, "q")
        before = time.time() - 1  # the proxy's clock may lag this host's a little
        post(broker, "q", "now")
        options = spec.options
        swift = Connection(authurl=options["auth_url"], user=options["user"],
                           key=options["key"], retries=0)
        # An event whose time is after any instant read after, named before them all.
        stray = Event(PROJECT, "q", events.POSTED, FAR_FUTURE_US / 1e6)
        swift.put_object(swift_layout.events_container(options["prefix"], PROJECT, "q"),
                         swift_layout.event_object(1, 1, "test"),
                         swift_layout.encode_events([stray]),
                         content_type=swift_layout.EVENTS_CONTENT_TYPE)
        ancient, *recent = trail(driver, "q")
        assert ancient == stray
        assert [event.kind for event in recent] == [events.POSTED]
        assert trail(driver, "q", after=before) == recent
    finally:
        driver.close()


def query_plan(path: str) -> list[str]:
    """The steps of SQLite's plan for a read of the events after an instant."""
    with closing(sqlite3.connect(path)) as db:
        return [row[-1] for row in db.execute(EXPLAIN + sql.EVENTS_OF_QUEUE_AFTER,
                                              (PROJECT, "q", 0.0))]


def test_a_read_after_an_instant_on_sqlite_is_an_index_range(tmp_path):
    """Also on a store made before the index, which gets it when next opened."""
    spec = DRIVERS["sqlite"](tmp_path)
    path = spec.options["path"]
    Synchronous(open_driver(spec)).close()
    with closing(sqlite3.connect(path)) as db:
        db.execute(DROP_TIME_INDEX)
    with pytest.raises(sqlite3.OperationalError, match="no such index"):
        query_plan(path)
    driver = Synchronous(open_driver(spec))
    try:
        plan = query_plan(path)
    finally:
        driver.close()
    assert any("USING INDEX events_queue_time" in step and "time>?" in step
               for step in plan), plan
    assert not any(step.startswith("SCAN") for step in plan), plan
