"""The event trail: what happened to each message, for the audits in ``delayq.spark_jobs``.

Each storage driver appends events to its own backend inside the same atomic step as the
transition they record (where the backend has one), so the trail says exactly what the
queue did. The trail is append-only and bounded by ``[events] retention``.

An event is one row of ``FIELDS``; which fields are set depends on its ``kind``:

==============  ===================================================================
kind            fields besides project, queue, kind, time
==============  ===================================================================
posted          message_id, due (delay expiry ``d``), ttl, expires
claimed         message_id, claim_id, claim_count (after the claim), expires
popped          message_id, claim_count — delivered and deleted in one step
deleted         message_id, claim_id (when deleted under a claim), claim_count
dead_lettered   message_id, claim_count, source, target, ttl, expires, body — written
                in the source queue's trail
edited          message_id, due (after the edit: unchanged unless it gave a delay),
                claim_count — a free message's body and/or delay changed (PATCH)
released        message_id, due (now plus the delay it was handed back with),
                claim_count — one message of a claim handed back by its holder (a
                consumer, or a push that failed)
redriven        message_id, claim_count (before the redrive reset it), source (this
                dead-letter queue), target (the queue it went to), expires
expired         message_id, claim_count; ``time`` is the instant it expired (the
                backend may notice later), ``expires`` the same instant
purged          no message: every message the queue held at ``time`` is gone
                (``DELETE`` of the queue, or ``DELETE .../messages`` of all of them)
==============  ===================================================================

Times are POSIX seconds from the backend's clock, as everywhere in delayq. Message ids
survive dead-letter moves, so a message's history is every event with its id.

An ``expired`` event is written by the driver that removes an expired message, however
late. A message the backend removes on its own writes none (MongoDB's TTL index, the
backstop that drops what the reaper left ``expired_retention`` after its expiry; Swift's
object expirer), nor one that a purge removed after it expired unnoticed: a message
whose last known ``expires`` has passed with no later event expired then. The audits
apply that rule on every backend to the messages no ending event accounts for, so an
``expired`` event, where one was written, is never counted twice.
"""

from __future__ import annotations

import json
import operator
from dataclasses import asdict, dataclass
from typing import Any

POSTED = "posted"
CLAIMED = "claimed"
POPPED = "popped"
DELETED = "deleted"
DEAD_LETTERED = "dead_lettered"
EXPIRED = "expired"
PURGED = "purged"
REDRIVEN = "redriven"
EDITED = "edited"
RELEASED = "released"
KINDS = (POSTED, CLAIMED, POPPED, DELETED, DEAD_LETTERED, EXPIRED, PURGED, REDRIVEN,
         EDITED, RELEASED)

# Events that end a message's life in the queue named by the event.
ENDINGS = (POPPED, DELETED, DEAD_LETTERED, EXPIRED, PURGED, REDRIVEN)

DEFAULT_RETENTION = 24 * 3600  # a daily audit sees a whole day; see docs for sizing


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the trail, as every driver reads it back."""

    project: str
    queue: str
    kind: str
    time: float
    message_id: str | None = None
    claim_id: str | None = None
    claim_count: int | None = None
    due: float | None = None
    ttl: int | None = None
    expires: float | None = None
    source: str | None = None
    target: str | None = None
    body: str | None = None  # JSON text of a dead-lettered message's body

    def as_row(self) -> dict[str, Any]:
        return asdict(self)


FIELDS = tuple(Event.__dataclass_fields__)
_FIELD_VALUES = operator.attrgetter(*FIELDS)


def event_row(event: Event) -> tuple:
    """*event*'s field values as a tuple, in ``FIELDS`` order."""
    return _FIELD_VALUES(event)


@dataclass(frozen=True, slots=True)
class Settings:
    """``[events]`` options as a driver needs them: retention 0 turns the trail off."""

    retention: int = DEFAULT_RETENTION

    @property
    def enabled(self) -> bool:
        return self.retention > 0


ON = Settings()
OFF = Settings(retention=0)


def body_text(body: Any) -> str:
    """A message body as the trail stores it: compact JSON text."""
    return json.dumps(body, separators=(",", ":"))
