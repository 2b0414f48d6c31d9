"""The delay audit with edited messages: each delivery is measured against the due time in
force when it came (the post's, or the latest edit's before it), on a hand-made trail
whose every figure is known.

  dq, a delayed queue; times in seconds after T0; the audit at 300.
  m1  posted due 30; edited at 10 to due 15; claimed at 17    lateness 2 (not 13 early)
  m2  posted due 30; edited at 5 to due 60; claimed at 61     lateness 1 (not 31)
  m3  posted due 20; claimed at 25; edited at 100 to due 200  lateness 5: an edit after
                                                             the first delivery counts not
  m4  posted due 10; edited at 5 to due 500                   waiting (due after 300)
  m5  posted due 0 (not delayed); edited at 1 to due 40; claimed at 41: not delayed
  m6  posted due 50, edited at 0 (the post's instant) to due 0; claimed at 0: lateness 0
"""

from __future__ import annotations

import pytest

from delayq import events
from delayq.spark_jobs import delay_audit
from delayq.spark_jobs.source import EVENT_SCHEMA
from tests import spark_session
from tests.audit_helpers import delay_row

spark = pytest.fixture(scope="session")(spark_session.spark_fixture)

T0 = 4_000_000_000.0
AS_OF = T0 + 300


def event(kind: str, at: float, message_id: str, **fields) -> dict:
    return events.Event(project="p", queue="dq", kind=kind, time=T0 + at,
                        message_id=message_id, **fields).as_row()


def posted(message_id: str, due: float) -> dict:
    return event(events.POSTED, 0, message_id, due=T0 + due, ttl=3600, expires=T0 + 3600)


def edited(at: float, message_id: str, due: float) -> dict:
    return event(events.EDITED, at, message_id, due=T0 + due, claim_count=0)


def claimed(at: float, message_id: str) -> dict:
    return event(events.CLAIMED, at, message_id, claim_id="c" + message_id, claim_count=1,
                 expires=T0 + 3600)


TRAIL = [
    posted("m1", 30), edited(10, "m1", 15), claimed(17, "m1"),
    posted("m2", 30), edited(5, "m2", 60), claimed(61, "m2"),
    posted("m3", 20), claimed(25, "m3"), edited(100, "m3", 200),
    posted("m4", 10), edited(5, "m4", 500),
    posted("m5", 0), edited(1, "m5", 40), claimed(41, "m5"),
    posted("m6", 50), edited(0, "m6", 0), claimed(0, "m6"),
]


def test_lateness_is_measured_against_the_due_time_in_force_at_the_first_delivery(spark):
    trail = spark.createDataFrame(TRAIL, EVENT_SCHEMA)
    [row] = delay_audit.run(trail, AS_OF)
    assert row == delay_row("p", "dq", messages=6, delays=[30, 30, 20, 10, 50],
                            lateness=[2, 1, 5, 0], waiting=1)
