"""The body keys and values of the dead-letter audit, on a hand-made trail: bodies nested
deeper than one walk goes (``bodies.DEPTH``), bodies that are not objects, values Spark
writes as JSON, a message moved twice counted once.

  q moves to dlq at 10 (claim count 3): m1 nested 10 levels deep, m2 "text", m3 [1, 2],
  m4 null, m5 {"n": 2.50, "s": "café", "b": true}; m1 is redriven at 20 and moved again
  at 30. The audit is at 100.
"""

from __future__ import annotations

import json

import pytest

from delayq import events
from delayq.spark_jobs import bodies, dead_letter_audit
from delayq.spark_jobs.source import EVENT_SCHEMA
from tests import spark_session

spark = pytest.fixture(scope="session")(spark_session.spark_fixture)

T0 = 1_790_000_000.0
DEEP = 10  # levels: more than one walk goes down


def nested(depth: int) -> dict:
    body: dict = {"leaf": depth}
    for level in range(depth - 1, 0, -1):
        body = {f"l{level}": body}
    return body


BODIES = {"m1": nested(DEEP), "m2": "text", "m3": [1, 2], "m4": None,
          "m5": {"n": 2.50, "s": "café", "b": True}}


def event(kind: str, at: float, message_id: str, queue: str = "q", **fields) -> dict:
    return events.Event(project="p", queue=queue, kind=kind, time=T0 + at,
                        message_id=message_id, **fields).as_row()


def moved(at: float, message_id: str) -> dict:
    return event(events.DEAD_LETTERED, at, message_id, claim_count=3, source="q",
                 target="dlq", ttl=3600, expires=T0 + 3600,
                 body=events.body_text(BODIES[message_id]))


TRAIL = [
    *(event(events.POSTED, 0, m, due=T0, ttl=3600, expires=T0 + 3600) for m in BODIES),
    *(moved(10, m) for m in BODIES),
    event(events.REDRIVEN, 20, "m1", queue="dlq", claim_count=3, source="dlq", target="q",
          expires=T0 + 3600),
    moved(30, "m1"),
]


def test_keys_and_values_of_every_body_counted_once_per_message(spark):
    assert DEEP > bodies.DEPTH
    trail = spark.createDataFrame(TRAIL, EVENT_SCHEMA)
    [row] = dead_letter_audit.run(trail, T0 + 100)
    assert (row["moved"], row["moved_messages"], row["received"]) == (6, 5, 6)
    assert row["endings"]["redriven"] == 1 and row["still_in_dlq"] == 5
    assert row["latest_moved_ids"] == ["m1", "m2", "m3", "m4", "m5"]
    deep_path = ".".join(f"l{level}" for level in range(1, DEEP))
    # m1's ten keys, the "" of m2 m3 m4, and m5's three keys: each message once.
    assert {k["key"]: k["count"] for k in row["top_keys"]} == {
        "": 3, "b": 1, "l1": 1, "l1.l2": 1, "l1.l2.l3": 1, "l1.l2.l3.l4": 1,
        "l1.l2.l3.l4.l5": 1, "l1.l2.l3.l4.l5.l6": 1, "l1.l2.l3.l4.l5.l6.l7": 1,
        "l1.l2.l3.l4.l5.l6.l7.l8": 1}
    assert len(row["top_keys"]) == dead_letter_audit.TOP
    assert {(v["key"], v["value"]): v["count"] for v in row["top_values"]} == {
        ("", json.dumps("text")): 1, ("", "null"): 1, ("b", "true"): 1, ("n", "2.5"): 1,
        ("s", '"café"'): 1, (f"{deep_path}.leaf", str(DEEP)): 1}
