"""The MongoDB driver's documents and indexes: every field name and index lives here.

These collections hold everything, for every project:

``queues``
    One document per queue: project ``p``, name ``q``, metadata ``md`` (JSON text, so any
    user key survives, dots and dollars included), the last message sequence number
    handed out ``k``, creation time ``cr``.

``messages``
    One document per message, all queues of all projects together, so a dead-letter move
    is one single-document update (``q`` changes). ``_id`` is the message id, random
    (``new_id``); post order is ``k``, never ``_id``. Times are
    BSON dates (milliseconds). ``a`` ("available") is when the message next becomes
    claimable, ``max(d, ce)``; the ``claimable`` index on ``(p, q, a, k)`` therefore holds
    a queue's claimable messages as one range ahead of every delayed or claimed one, and a
    claim reads only what it takes. ``d`` (due) exists only on messages posted with a
    delay or made due later since (an edit, a hand-back, or a retry policy's wait set by
    a claim, renewal or release: ``claimer.due_again``), so normal queues store nothing
    for the feature; ``c``/``ce``/``cc`` (claim id, claim expiry, claim count) appear
    with the first claim; ``s``/``m`` (source queue, move time) only on dead-lettered
    messages; ``ed`` (edits made) with the first edit. A live claim's message is claimed
    whatever its ``d``; one no live claim holds is delayed while ``d`` is ahead.

``claims``
    One document per claim: its id ``_id`` (random, ``new_id``), ttl, grace, creation and
    expiry.

``events``
    The event trail (``delayq.events``): one document per event, every queue of every
    project together, written right after the change it records (``trail.py``). It
    names its project and queue itself (``p``, ``q``), so the trail of a deleted queue is
    still found and read. Fields other than project, queue, kind ``ev`` and time ``at``
    appear only when the event has them (``EVENT_FIELDS``). ``x`` is when the event is
    forgotten, its time plus ``[events] retention``: a TTL index on it bounds the trail,
    and a later change of the retention applies to the events written after it.

``tallies``
    The counts behind the /metrics gauges (``delayq.tallies``, kept by
    ``storage/mongo/tallies.py``): one document per page of a queue's tally, named by
    project, queue, level ``l`` and page ``g``; ``n`` maps ``"<kind>_<block in the
    page>"`` to the number of that kind's instants in that block. ``x`` is when the page
    is no longer read (its end plus ``tallies.HINDSIGHT``): a TTL index on it drops old
    pages by themselves. The last level's one page covers every instant BSON can hold
    and has no ``x``.

``subscriptions``
    One document per subscription (``delayq.subscription``, kept by
    ``subscriptions.py``): ``_id`` is its id (``uuid4().hex``), then project, queue,
    subscriber URL ``sb``, ttl, options ``o`` (JSON text, as metadata), creation and
    expiry ``e``. A unique index makes (project, queue, subscriber) one document: an
    expired one still holding the key is removed by the write that needs it. Reads
    compare ``e`` with now; a TTL index on ``e`` removes expired ones within the TTL
    monitor's minute.

``post_keys``
    The idempotency keys of posts (``delayq.idempotency``, kept by ``post_keys.py``): one
    document per key a queue keeps, named by project, queue and key ``ik`` (unique
    together), with the digest ``dg`` of the post's body and the ids ``ids`` of the
    messages it stored. ``x`` is when the key is no longer kept, the post's time plus its
    window: lookups compare it with the current time, and a TTL index on it removes the
    document afterwards.

``locks``
    Leases that let one process of the deployment do a job at a time: one document per
    job, named by ``_id``; ``e`` is when the holder's lease ends and ``h`` who holds it
    (host and process id, for operators). Only the background reaper's lease for now.

``projects``
    One document per project that created a queue under ``max_queues_per_project``,
    named by ``_id`` (the project): ``v`` counts those creations. Each writes it in its
    transaction so that concurrent ones conflict (``quotas.py``); nothing reads it.

``e`` (expiry) carries a TTL index in ``messages``, ``claims`` and ``subscriptions``;
queries never rely on it and compare ``e`` with the current time. In ``claims`` and
``subscriptions`` it removes a document when it expires (its TTL monitor runs once a
minute). In ``messages`` it is a backstop only: it fires ``expired_retention`` seconds
after the expiry, by which time delayq's reaper (or a claim meeting the message) has
removed the message and reported it ``expired``; what it deletes, it deletes unseen. In
``events``, ``e`` is the message's expiry as the event saw it, and only ``x`` is a TTL
field.
"""

from __future__ import annotations

import json
import math
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, IndexModel

from delayq import events
from delayq.message import Message

# Collections
QUEUES = "queues"
MESSAGES = "messages"
CLAIMS = "claims"
CLOCK = "clock"
EVENTS = "events"
TALLIES = "tallies"
LOCKS = "locks"
SUBSCRIPTIONS = "subscriptions"
POST_KEYS = "post_keys"
PROJECTS = "projects"

# Fields (short: they are repeated in every document)
ID = "_id"
PROJECT = "p"
QUEUE = "q"
SEQ = "k"  # messages: position in its queue; queues: last position handed out
METADATA = "md"
CREATED = "cr"
BODY = "b"
TTL = "t"
EXPIRES = "e"
DUE = "d"
AVAILABLE = "a"
CLIENT = "u"
CLAIM = "c"
CLAIM_EXPIRES = "ce"
CLAIM_COUNT = "cc"
SOURCE = "s"
MOVED = "m"
GRACE = "g"
EDITS = "ed"  # counted so that a claim's pinned filter sees a body-only edit
CLOCK_TIME = "t"
LEVEL = "l"
PAGE = "g"
TALLY = "n"
HOLDER = "h"  # locks: who holds the lease (its end is EXPIRES)
SUBSCRIBER = "sb"
OPTIONS = "o"
# subscriptions: whether confirmed (absent in documents written before it existed:
# confirmed, as Zaqar reads its own field ``c``).
CONFIRMED = "cf"
POST_KEY = "ik"  # post_keys: the idempotency key (with PROJECT and QUEUE)
POST_DIGEST = "dg"
POST_IDS = "ids"
VERSION = "v"  # projects: creations under the queue quota (written so as to conflict)
# The locks document of the background reaper's lease (delayq.storage.reaper).
REAPER_LEASE = "reaper"
# What a message's tally instants depend on (``tallies.marks``).
TALLY_FIELDS = {CREATED: 1, DUE: 1, EXPIRES: 1, CLAIM_EXPIRES: 1}

# Event fields: kind and time, when the TTL monitor removes the event (or a tally page),
# and the optional fields of delayq.events.Event (those a message document has too keep
# its name).
EVENT_KIND = "ev"
EVENT_TIME = "at"
FORGET_AT = "x"
MESSAGE_ID = "i"
TARGET = "dq"
EVENT_FIELDS = {
    "message_id": MESSAGE_ID, "claim_id": CLAIM, "claim_count": CLAIM_COUNT, "due": DUE,
    "ttl": TTL, "expires": EXPIRES, "source": SOURCE, "target": TARGET, "body": BODY,
}
# Which optional event fields are stored as what: ids as ObjectIds, times as dates.
EVENT_IDS = ("message_id", "claim_id")
EVENT_TIMES = ("due", "expires")

# Index names, used as query hints so each hot query keeps its index whatever the planner
# would pick from statistics.
CLAIMABLE_INDEX = "claimable"
LISTING_INDEX = "listing"
POST_KEY_INDEX = "post_key"
CLAIM_INDEX = "claim"
TRAIL_INDEX = "trail"
PAGE_INDEX = "page"
EXPIRY_INDEX = "expiry"  # the TTL index of each collection that has one
SUBSCRIBER_INDEX = "subscriber"
SUBSCRIBED_INDEX = "subscribed"
# The key of the messages' expiry index, as collMod names the index to change.
EXPIRY_KEY = {EXPIRES: ASCENDING}


def indexes(expired_retention: int) -> dict[str, list[IndexModel]]:
    """Every collection's indexes; the messages' TTL index drops an expired message
    *expired_retention* seconds after its expiry (a backstop behind the reaper)."""
    return {
        QUEUES: [
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING)], name="queue",
                       unique=True),
        ],
        MESSAGES: [
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING), (AVAILABLE, ASCENDING),
                        (SEQ, ASCENDING)], name=CLAIMABLE_INDEX),
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING), (SEQ, ASCENDING)],
                       name=LISTING_INDEX),
            IndexModel([(CLAIM, ASCENDING)], name=CLAIM_INDEX,
                       partialFilterExpression={CLAIM: {"$exists": True}}),
            # Also the reaper's: expired messages, oldest expiry first, of every queue.
            IndexModel(list(EXPIRY_KEY.items()), name=EXPIRY_INDEX,
                       expireAfterSeconds=expired_retention),
        ],
        CLAIMS: [
            IndexModel([(EXPIRES, ASCENDING)], name=EXPIRY_INDEX, expireAfterSeconds=0),
        ],
        EVENTS: [
            # One queue's trail in order, and the queues that have one (distinct p, q).
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING), (EVENT_TIME, ASCENDING),
                        (ID, ASCENDING)], name=TRAIL_INDEX),
            IndexModel([(FORGET_AT, ASCENDING)], name=EXPIRY_INDEX, expireAfterSeconds=0),
        ],
        POST_KEYS: [
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING), (POST_KEY, ASCENDING)],
                       name=POST_KEY_INDEX, unique=True),
            IndexModel([(FORGET_AT, ASCENDING)], name=EXPIRY_INDEX, expireAfterSeconds=0),
        ],
        TALLIES: [
            # One document per page (upserts rely on it); a queue's pages together (purge).
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING), (LEVEL, ASCENDING),
                        (PAGE, ASCENDING)], name=PAGE_INDEX, unique=True),
            IndexModel([(FORGET_AT, ASCENDING)], name=EXPIRY_INDEX, expireAfterSeconds=0),
        ],
        SUBSCRIPTIONS: [
            # A queue's subscriptions by id: listings, and every lookup by id.
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING), (ID, ASCENDING)],
                       name=LISTING_INDEX),
            IndexModel([(PROJECT, ASCENDING), (QUEUE, ASCENDING), (SUBSCRIBER, ASCENDING)],
                       name=SUBSCRIBER_INDEX, unique=True),
            # The subscribed queues: the live range of it, read without the documents.
            IndexModel([(EXPIRES, ASCENDING), (PROJECT, ASCENDING), (QUEUE, ASCENDING)],
                       name=SUBSCRIBED_INDEX),
            IndexModel(list(EXPIRY_KEY.items()), name=EXPIRY_INDEX, expireAfterSeconds=0),
        ],
    }


CLAIMABLE_ORDER = [(AVAILABLE, ASCENDING), (SEQ, ASCENDING)]
POST_ORDER = [(SEQ, ASCENDING)]
EXPIRY_ORDER = [(EXPIRES, ASCENDING)]
# Oldest first; events of the same millisecond in the order written, as their ObjectIds
# (made in order by the writing process) sort.
TRAIL_ORDER = [(EVENT_TIME, ASCENDING), (ID, ASCENDING)]

EPOCH = datetime(1970, 1, 1)
ONE_MS = timedelta(milliseconds=1)


def to_ms(seconds: float) -> int:
    """POSIX seconds as whole milliseconds, rounded down (never later than *seconds*).

    Rounding to microseconds first keeps float noise from taking a millisecond off
    (1800000004.9999998 is 1800000005.000000).
    """
    return math.floor(round(seconds * 1_000_000) / 1000)


def date(ms: int) -> datetime:
    """A BSON date (naive UTC, as pymongo stores it) from POSIX milliseconds."""
    return EPOCH + timedelta(milliseconds=ms)


def ms(value: datetime) -> int:
    """POSIX milliseconds of a BSON date."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return (value - EPOCH) // ONE_MS


def new_id() -> ObjectId:
    """A message or claim id: 12 random bytes from the system's CSPRNG, kept as an
    ObjectId (24 hexadecimal characters in the API, 12 bytes in documents and indexes).

    Not ``ObjectId()``, whose time, per-process value and counter let anyone who sees one
    id guess the ids made near it; these are 96 random bits, in no order.
    """
    return ObjectId(secrets.token_bytes(12))


def object_id(text: str) -> ObjectId | str:
    """The ObjectId an id string names; a malformed one stays a string, which no stored
    id equals, so it finds nothing."""
    return ObjectId(text) if ObjectId.is_valid(text) else text


def encode_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def new_message(project: str, queue: str, seq: int, body: Any, ttl: int, delay: float,
                client_id: str, now: int) -> dict[str, Any]:
    """A message document posted at *now* (ms)."""
    due = now + round(delay * 1000)
    doc = {ID: new_id(), PROJECT: project, QUEUE: queue, SEQ: seq,
           BODY: encode_json(body), TTL: ttl, CREATED: date(now),
           EXPIRES: date(now + ttl * 1000), AVAILABLE: date(due), CLIENT: client_id}
    if delay:
        doc[DUE] = date(due)
    return doc


def available(claim_expires: int, due: int | None) -> int:
    """When a message held until *claim_expires* (ms) is next claimable: at the claim's
    end, or later if it is due later (*due*, ms; None: due by then)."""
    return claim_expires if due is None else max(claim_expires, due)


def applied(doc: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """The document *doc* as *update* (``$set``, ``$unset``, ``$inc`` and ``$max`` of
    top-level fields) leaves it."""
    after = {**doc, **update.get("$set", {})}
    for name in update.get("$unset", {}):
        after.pop(name, None)
    for name, n in update.get("$inc", {}).items():
        after[name] = after.get(name, 0) + n
    for name, value in update.get("$max", {}).items():
        after[name] = max(after[name], value) if name in after else value
    return after


def unclaimed(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The message document *doc* without its claim (released, moved or redriven), with
    *changes* (field name: value) applied."""
    return {**{name: value for name, value in doc.items()
               if name not in (CLAIM, CLAIM_EXPIRES)}, **changes}


def not_held(now: int) -> dict[str, Any]:
    """The filter of messages no live claim holds at *now* (ms): never claimed, or their
    claim is over (``$not``: a missing claim expiry matches too)."""
    return {CLAIM_EXPIRES: {"$not": {"$gt": date(now)}}}


def held(project: str, queue: str, claim_id: ObjectId | str, now: int) -> dict[str, Any]:
    """The filter of the messages a claim holds now.

    A held message cannot have expired (a claim pushes the expiry past its own),
    but saying so keeps an expired one, reaped or not, out of every use of it.
    """
    return {CLAIM: claim_id, PROJECT: project, QUEUE: queue,
            CLAIM_EXPIRES: {"$gt": date(now)}, EXPIRES: {"$gt": date(now)}}


def due_ms(doc: dict[str, Any]) -> int:
    """When the message was or is due: its ``d``, or its creation without a delay."""
    return ms(doc.get(DUE) or doc[CREATED])


def message(doc: dict[str, Any], now: int) -> Message:
    """The Message a document stores, read at *now* (ms)."""
    claim = doc.get(CLAIM)
    claim_expires = doc.get(CLAIM_EXPIRES)
    moved = doc.get(MOVED)
    return Message(
        id=str(doc[ID]), body=json.loads(doc[BODY]), ttl=doc[TTL],
        created=ms(doc[CREATED]) / 1000, expires=ms(doc[EXPIRES]) / 1000,
        due=due_ms(doc) / 1000, client_id=doc[CLIENT],
        claim_id=str(claim) if claim is not None else None,
        claim_expires=ms(claim_expires) / 1000 if claim_expires is not None else 0.0,
        claim_count=doc.get(CLAIM_COUNT, 0), as_of=now / 1000,
        source_queue=doc.get(SOURCE), moved_at=ms(moved) / 1000 if moved else None)


def new_event(project: str, queue: str, kind: str, now: int, retention: int,
              **fields: Any) -> dict[str, Any]:
    """An event document of *kind* at *now* (ms), forgotten *retention* seconds later.

    *fields* are optional Event fields as the driver holds them: ids as ObjectIds, due
    and expires in ms; None leaves a field out.
    """
    doc = {ID: ObjectId(), PROJECT: project, QUEUE: queue, EVENT_KIND: kind,
           EVENT_TIME: date(now), FORGET_AT: date(now + retention * 1000)}
    for name, value in fields.items():
        if value is not None:
            doc[EVENT_FIELDS[name]] = date(value) if name in EVENT_TIMES else value
    return doc


def event(doc: dict[str, Any]) -> events.Event:
    """The Event an event document stores."""
    fields: dict[str, Any] = {}
    for name, stored in EVENT_FIELDS.items():
        value = doc.get(stored)
        if value is None:
            continue
        if name in EVENT_IDS:
            value = str(value)
        elif name in EVENT_TIMES:
            value = ms(value) / 1000
        fields[name] = value
    return events.Event(project=doc[PROJECT], queue=doc[QUEUE], kind=doc[EVENT_KIND],
                        time=ms(doc[EVENT_TIME]) / 1000, **fields)
