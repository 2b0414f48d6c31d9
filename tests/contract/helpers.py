"""Short hands for the contract tests: post and claim through the broker."""

from __future__ import annotations

from typing import Any

from delayq.broker import Broker
from delayq.spark_jobs import source
from delayq.storage.base import Driver
from delayq.validation import PostedMessage

PROJECT = "contract"
CLIENT = "2c4c6f9a-4f8e-4a57-9d0e-6a6d0d1e2f3a"


def post(broker: Broker, queue: str, *bodies: Any, ttl: int | None = None,
         delay: int | None = None, project: str = PROJECT) -> list[str]:
    """Post one message per body; returns their ids."""
    messages = [PostedMessage(body, ttl, delay) for body in bodies]
    return broker.post(project, queue, CLIENT, messages, size=0)


def claim(broker: Broker, queue: str, *, limit: int = 10, ttl: int = 3600, grace: int = 60,
          project: str = PROJECT):
    """Claim; returns the Claim or None."""
    return broker.claim(project, queue, ttl=ttl, grace=grace, limit=limit)


def claimed_ids(broker: Broker, queue: str, **kwargs: Any) -> list[str]:
    result = claim(broker, queue, **kwargs)
    return [m.id for m in result.messages] if result else []


def create(broker: Broker, queue: str, project: str = PROJECT, **metadata: Any) -> None:
    broker.create_queue(project, queue, metadata)


def listed_ids(broker: Broker, queue: str, **kwargs: Any) -> list[str]:
    options = {"client_id": CLIENT, "marker": None, "limit": 20, "echo": True,
               "include_claimed": False, "include_delayed": False, **kwargs}
    messages, _ = broker.list_messages(PROJECT, queue, **options)
    return [m.id for m in messages]


def write(broker: Broker, queue: str, body: Any = "a write", **kwargs: Any) -> list[str]:
    """A post that, as every write does, reaps the expired messages before it: on a
    driver whose writes do not reap (``Driver.reaps_on_write``), followed by one pass of
    the background reaper, which does it in their stead."""
    ids = post(broker, queue, body, **kwargs)
    reap_unless_writes_do(broker.driver)
    return ids


def reap_unless_writes_do(driver: Driver) -> None:
    """What a write leaves reaped, on every driver: one reaper pass where writes do not."""
    if not driver.reaps_on_write:
        driver.reap()


def batch_rows(driver, queue: str, after: float | None = None) -> list[tuple]:
    """``Trail.event_batches`` of *queue* in the audits' schema, as row tuples."""
    schema = source.arrow_schema(source.EVENT_SCHEMA)
    batches = list(driver.trail.event_batches(PROJECT, queue, schema, after=after))
    assert all(batch.schema == schema for batch in batches)
    return [tuple(row.values()) for batch in batches for row in batch.to_pylist()]
