"""Where the Swift driver keeps everything: container and object names, record headers.

One container per queue, ``<prefix>:<project>:<queue>`` (the project percent-encoded, or
hashed when long, so no name exceeds Swift's 256 bytes and ``:`` separates the parts).
Inside it:

``meta``
    The queue's metadata (JSON).
``m/<id>``
    A message: its body (JSON) and its state in ``X-Object-Meta-*`` headers. Ids begin
    with the post time, so listing ``m/`` is post order, and end with 64 random bits, so
    that no id tells another (``new_message_id``). ``X-Delete-At`` is its expiry
    plus ``expired_retention``: an expired message stays stored that long for the driver
    to remove it itself and report it (``expired``), and is dropped by Swift, unseen,
    only when nobody did.
``a/<available>.<id>.<count>.<generation>.<state>.<expires>[.<claim end>]``
    The availability index: an empty object per message, named by when it next becomes
    claimable (its due time; while a claim holds it, the later of that and the claim's
    expiry) — or by its expiry, when that comes first (a delay past the ttl) — so listing
    ``a/`` up to *now* yields exactly the claimable messages, oldest first, however many
    are delayed or claimed and with no delay condition at all, and with them every
    expired one, which the reaper removes. The name also carries what a claim needs to
    decide without reading the message: claim count, generation, state (``f`` free or
    delayed, ``c`` claimed) and expiry — which is also all ``stats`` needs. A claimed
    message due after its claim's expiry (a retry policy's wait) has its claim's expiry
    as a seventh part: claimed until then, delayed after. ``X-Delete-At`` as its
    message's.
``c/<id>/<generation>``
    Generation markers (``Marker``), the source of truth for exclusivity: the n-th claim
    (or the dead-letter move, edit, or expiry) of a message is the one request that
    creates ``c/<id>/<n>`` with ``If-None-Match: *``. Body: kind (claim, move, edit or
    expire), claim id, claim expiry; an edit's marker carries the edit itself (new due
    time, new body), a claim's under a retry policy the due time it sets, so that
    whoever meets it can complete it. An ``expire`` marker is
    the right to delete an expired message and report it: of all the claims and reapers
    that meet it, only its winner does.
``k/<claim id>``
    A claim: ttl, grace, times and the ``[id, generation]`` pairs it holds.
``t/<level>/<page>/<slot>``
    Tallies (``delayq.tallies``): the running sums of the changes counted in one page of
    one level by the processes that held writer slot ``<slot>`` (decimal), as JSON
    ``[[kind, block, n], ...]``. Only the process holding the slot's lease writes it (so
    no update is lost to a race: Swift has no atomic increment), continuing from the sums
    its predecessors left; a count lists the pages it reads and sums every slot's.
    ``X-Delete-At`` is the page's end plus ``HINDSIGHT``, so Swift removes pages no
    count reads again. Level and page are decimal, zero-padded.

The event trail (``delayq.events``) of a queue lives in a container of its own,
``<prefix>:events,<project>,<queue>``, which deleting the queue leaves alone (the
project part as in the queue's container; neither it nor a queue name can hold a comma,
and no queue container's name has a comma right after the prefix's colon). It holds one
object per request that changed messages:

``<time>.<serial>.<writer>``
    That request's events, one JSON object a line (the fields of ``delayq.events.Event``
    that are set), with ``X-Delete-At`` at its time plus ``[events] retention``. Names
    sort by the request's time, then by the writing process's serial number (the order
    it wrote in), then by the writer, a random token of that process (so no two collide:
    unlike a tally's writer slot, which processes reuse one after another).

Writer slots are leased in one container for the whole deployment,
``<prefix>:writers`` (no queue container's name lacks a second colon, no events
container's name lacks the comma after ``events``, so neither can be it; the same holds
for ``<prefix>:clock``, which holds the one object ``now`` that reads the proxy's clock):

``slot/<n>``
    The lease of writer slot ``n`` (decimal): created with ``If-None-Match: *`` by the
    process that takes it (a bid, JSON with ``kind`` ``lease``, the holder's nonce, host
    and pid), ``X-Delete-After`` the lease, renewed by the holder with a ``POST`` of a new
    one, deleted on close. A process takes the lowest free slot, so the slots in use, and
    the tally objects a count reads, are bounded by the processes alive at once, not by
    those ever started.
``reaper``
    The lease of the background reaper's pass (``delayq.storage.reaper``): a bid like a
    slot's (``kind`` ``lease``), ``X-Delete-After`` the lease, never renewed, so one
    process of the deployment reaps per pass.

Subscriptions (``delayq.subscription``) have one container for the whole deployment,
``<prefix>:subscriptions`` (no second colon, no comma: neither a queue's nor an events
container), so that the queues subscribed in every project are one listing
(``subscriptions.py``):

``s/<project>/<queue>/<id>/<written>.<expires>``
    A version of a subscription (JSON: project, queue, id, subscriber, ttl, options,
    creation and expiry times, and when this version was written), its expiry in its
    name so that listings tell the live ones without reading them; the newest version
    of an id is the subscription. ``X-Delete-At`` its expiry.
``u/<project>/<queue>/<subscriber digest>/<n>``
    The locks of one subscriber of one queue (the SHA-256 of its URL), each won by a
    bid (``kind`` ``subscriber``): the newest names the subscription that holds the
    subscriber, or says ``released``. The newest is kept; older ones carry
    ``X-Delete-After`` a day.

The leases behind the quotas (``[quotas]``) have one container for the whole deployment,
``<prefix>:quotas`` (no second colon, no comma: neither a queue's nor an events
container), whose objects ``quotas.py`` describes.

Times in names are microseconds in 14 hexadecimal digits, so names sort by time.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from delayq import events
from delayq.message import Message

META = "meta"
MESSAGE_PREFIX = "m/"
INDEX_PREFIX = "a/"
MARKER_PREFIX = "c/"
CLAIM_PREFIX = "k/"
TALLY_PREFIX = "t/"

FREE = "f"  # free or delayed: available at its due time
CLAIMED = "c"  # claimed: available again at the claim's expiry

MOVE = "move"
CLAIM = "claim"
EDIT = "edit"
EXPIRE = "expire"  # the right to remove an expired message and report it
LEASE = "lease"  # the kind of a writer slot's or the reaper's lease (a bid like a marker)

US = 1_000_000  # times are kept in microseconds
TIME_DIGITS = 14
GENERATION_DIGITS = 6
SERIAL_DIGITS = 12
LONG_PROJECT = 120  # longer (encoded) project ids are hashed into container names
HASHED = "#"  # starts a hashed project part (quote() encodes a project's own "#")

EVENTS = "events"
EVENTS_SEPARATOR = ","  # between the parts of an events container's name
EVENTS_CONTENT_TYPE = "application/x-ndjson"

# Message state headers (Swift hands X-Object-Meta-* back lower-cased).
META_HEADER = "x-object-meta-"
FIELDS = ("ttl", "created", "due", "client", "expires", "count", "generation", "claim",
          "claim-expires", "source", "moved", "moving")


def time_name(us: int) -> str:
    return f"{us:0{TIME_DIGITS}x}"


def project_part(project: str) -> str:
    encoded = quote(project, safe="")
    if len(encoded) <= LONG_PROJECT:
        return encoded
    return HASHED + hashlib.sha256(project.encode("utf-8", "surrogatepass")).hexdigest()


def project_of_part(part: str) -> str | None:
    """The project a container name's project part names; None when it is hashed."""
    return None if part.startswith(HASHED) else unquote(part)


def queue_prefix(prefix: str, project: str) -> str:
    """The start of the names of every queue container of *project*."""
    return f"{prefix}:{project_part(project)}:"


def container(prefix: str, project: str, queue: str) -> str:
    return queue_prefix(prefix, project) + queue


def clock_container(prefix: str) -> str:
    return f"{prefix}:clock"


CLOCK_PREFIX = "now/"


def clock_object(nonce: str) -> str:
    """The object one driver writes to read the proxy's clock: a process's own, because a
    HEAD can miss an object another process is overwriting at the same moment."""
    return CLOCK_PREFIX + nonce


WRITERS = "writers"
SLOT_PREFIX = "slot/"


def writers_container(prefix: str) -> str:
    """The container of the writer slots' leases, one for the whole deployment."""
    return f"{prefix}:{WRITERS}"


def slot_name(slot: int) -> str:
    """The lease object of writer slot *slot*."""
    return f"{SLOT_PREFIX}{slot}"


# The reaper's lease, in the writers container (no slot's name, which begins with
# SLOT_PREFIX).
REAPER = "reaper"


QUOTAS = "quotas"


def quotas_container(prefix: str) -> str:
    """The container of the quota leases (``quotas.py``), one for the whole deployment."""
    return f"{prefix}:{QUOTAS}"


SUBSCRIPTIONS = "subscriptions"
SUBSCRIPTION_PREFIX = "s/"
SUBSCRIBER_PREFIX = "u/"
SUBSCRIBER = "subscriber"  # the kind of a subscriber's lock (a bid like a marker)


def subscriptions_container(prefix: str) -> str:
    """The container of every project's subscriptions."""
    return f"{prefix}:{SUBSCRIPTIONS}"


def queue_subscriptions(project: str, queue: str) -> str:
    """The start of the names of the queue's subscriptions."""
    return f"{SUBSCRIPTION_PREFIX}{project_part(project)}/{queue}/"


def subscription_name(project: str, queue: str, subscription_id: str, written: int,
                      expires: int) -> str:
    """The name of the version of a subscription written at *written*."""
    return (f"{queue_subscriptions(project, queue)}{subscription_id}/"
            f"{time_name(written)}.{time_name(expires)}")


@dataclass(frozen=True)
class SubscriptionName:
    """What the name of a subscription's version tells."""

    part: str  # the project part (``project_part``)
    queue: str
    id: str
    written: int
    expires: int

    @classmethod
    def parse(cls, name: str) -> SubscriptionName | None:
        try:
            part, queue, subscription_id, times = name[len(SUBSCRIPTION_PREFIX):].split("/")
            written, expires = times.split(".")
            return cls(part, queue, subscription_id, int(written, 16), int(expires, 16))
        except ValueError:
            return None


def subscriber_locks(project: str, queue: str, subscriber: str) -> str:
    """The start of the names of the locks of *subscriber* of the queue."""
    digest = hashlib.sha256(subscriber.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{SUBSCRIBER_PREFIX}{project_part(project)}/{queue}/{digest}/"


def subscriber_lock(project: str, queue: str, subscriber: str, generation: int) -> str:
    return (f"{subscriber_locks(project, queue, subscriber)}"
            f"{generation:0{GENERATION_DIGITS}d}")


def generation_of(name: str) -> int:
    """The generation a marker's or a lock's name ends with."""
    return int(name.rsplit("/", 1)[1])


def lease_body(holder: str) -> dict[str, Any]:
    """The body of a writer slot's or the reaper's lease, as its bid writes it."""
    # Host and pid tell an operator whose lease it is; the holder nonce tells the
    # process itself.
    return {"kind": LEASE, "holder": holder, "host": socket.gethostname(),
            "pid": os.getpid()}


def parse_container(prefix: str, name: str) -> tuple[str, str] | None:
    """``(project part, queue)`` of a queue container's name; None for any other."""
    part, colon, queue = name[len(prefix) + 1:].partition(":")
    return (part, queue) if name.startswith(prefix + ":") and colon and queue else None


def events_prefix(prefix: str, project: str | None = None) -> str:
    """The start of the names of every events container (of *project*, when given)."""
    start = f"{prefix}:{EVENTS}{EVENTS_SEPARATOR}"
    return start if project is None else start + project_part(project) + EVENTS_SEPARATOR


def events_container(prefix: str, project: str, queue: str) -> str:
    """The container of a queue's event trail: it outlives the queue's own."""
    return events_container_of_part(prefix, project_part(project), queue)


def events_container_of_part(prefix: str, part: str, queue: str) -> str:
    """``events_container`` from the project part its name holds."""
    return f"{events_prefix(prefix)}{part}{EVENTS_SEPARATOR}{queue}"


def parse_events_container(prefix: str, name: str) -> tuple[str, str] | None:
    """``(project part, queue)`` of an events container's name; None for any other."""
    start = events_prefix(prefix)
    if not name.startswith(start):
        return None
    part, separator, queue = name[len(start):].partition(EVENTS_SEPARATOR)
    return (part, queue) if separator and queue else None


def event_object(time_us: int, serial: int, writer: str) -> str:
    """The name of one request's events: by time, then in the order *writer* wrote."""
    return f"{time_name(time_us)}.{serial:0{SERIAL_DIGITS}x}.{writer}"


def encode_events(trail: Iterable[events.Event]) -> bytes:
    """Events as JSON lines, each with only the fields that are set."""
    return b"".join(
        encode({name: value for name, value in event.as_row().items() if value is not None})
        + b"\n" for event in trail)


def decode_events(body: bytes) -> list[events.Event]:
    return [events.Event(**json.loads(line)) for line in body.splitlines() if line]


RANDOM_DIGITS = 16  # hexadecimal digits of a message id's random part: 64 bits
# The lengths of message ids: the ones made now, and those made before with 10 random
# digits (their messages keep them).
ID_LENGTHS = frozenset((TIME_DIGITS + RANDOM_DIGITS, TIME_DIGITS + 10))
HEX = frozenset("0123456789abcdef")


def new_message_id(now_us: int) -> str:
    """Post time first, so ids (and ``m/`` names) sort in post order; then random digits
    from the system's CSPRNG, so that knowing ids tells nothing of the others: a
    message's name can be guessed no better than its random part."""
    return time_name(now_us) + secrets.token_hex(RANDOM_DIGITS // 2)


def is_message_id(text: str) -> bool:
    """True for text shaped like an id this driver makes (anything else names nothing)."""
    return len(text) in ID_LENGTHS and set(text) <= HEX


def is_uuid_hex(text: str) -> bool:
    """True for text shaped like a claim or subscription id (a UUID's 32 hex digits)."""
    return len(text) == 32 and set(text) <= HEX


def message_name(message_id: str) -> str:
    return MESSAGE_PREFIX + message_id


def marker_name(message_id: str, generation: int) -> str:
    return f"{MARKER_PREFIX}{message_id}/{generation:0{GENERATION_DIGITS}d}"


def marker_prefix(message_id: str) -> str:
    return f"{MARKER_PREFIX}{message_id}/"


def claim_name(claim_id: str) -> str:
    return CLAIM_PREFIX + claim_id


TALLY_PAGE_DIGITS = 16  # a page number of any level (at most 2^52 for a 64-bit ms clock)


def tally_page_prefix(level: int, page: int) -> str:
    """The start of the names of every writer slot's tally of one page of one level."""
    return f"{TALLY_PREFIX}{level}/{page:0{TALLY_PAGE_DIGITS}d}/"


def tally_name(level: int, page: int, slot: int) -> str:
    return f"{tally_page_prefix(level, page)}{slot}"


def tally_level(name: str) -> int:
    """The level of a tally object's name."""
    return int(name[len(TALLY_PREFIX):].split("/", 1)[0])


def encode_tally(deltas: Iterable[tuple[int, int, int]]) -> bytes:
    """A tally object's body from ``(kind, block, n)`` triples."""
    return encode(sorted(deltas))


def decode_tally(body: bytes) -> list[tuple[int, int, int]]:
    return [(kind, block, n) for kind, block, n in json.loads(body)]


def index_end(now_us: int) -> str:
    """The listing end marker past every entry available at *now_us*."""
    return INDEX_PREFIX + time_name(now_us + 1)


@dataclass(frozen=True)
class Entry:
    """One availability-index entry."""

    available: int
    message_id: str
    count: int
    generation: int
    state: str
    expires: int
    # A claimed message due after its claim: when the claim ends (0: at ``available``).
    claim_ends: int = 0

    @property
    def name(self) -> str:
        name = (f"{INDEX_PREFIX}{time_name(self.available)}.{self.message_id}.{self.count}."
                f"{self.generation}.{self.state}.{time_name(self.expires)}")
        return f"{name}.{time_name(self.claim_ends)}" if self.claim_ends else name

    def is_claimed(self, now_us: int) -> bool:
        """Held by a live claim at *now_us*, whatever its due time."""
        return self.state == CLAIMED and (self.claim_ends or self.available) > now_us

    @classmethod
    def parse(cls, name: str) -> Entry | None:
        try:
            available, message_id, count, generation, state, expires, *rest = (
                name[len(INDEX_PREFIX):].split("."))
            if len(rest) > 1:
                return None
            return cls(int(available, 16), message_id, int(count), int(generation), state,
                       int(expires, 16), int(rest[0], 16) if rest else 0)
        except ValueError:
            return None


def live_entries(names: Iterable[str], now_us: int) -> list[Entry]:
    """The index entries among *names* of the messages live at *now_us*, one a message:
    a message may briefly have two (a claim moves its entry by writing the new one
    first)."""
    seen: set[str] = set()
    live = []
    for name in names:
        entry = Entry.parse(name)
        if entry is None or entry.expires <= now_us or entry.message_id in seen:
            continue
        seen.add(entry.message_id)
        live.append(entry)
    return live


@dataclass
class Record:
    """A message's state, as kept in its object's headers (times in microseconds)."""

    ttl: int
    created: int
    due: int
    client: str
    expires: int
    count: int = 0
    generation: int = 0
    claim: str = ""
    claim_expires: int = 0
    source: str = ""
    moved: int = 0
    moving: str = ""  # a dead-letter move under way: its marker (JSON), until it is done

    def headers(self) -> dict[str, str]:
        values = (self.ttl, self.created, self.due, self.client, self.expires, self.count,
                  self.generation, self.claim, self.claim_expires, self.source, self.moved,
                  self.moving)
        return {META_HEADER + name: str(value) for name, value in zip(FIELDS, values,
                                                                      strict=True)}

    @classmethod
    def from_headers(cls, headers: dict[str, str]) -> Record:
        raw = {name: headers.get(META_HEADER + name, "") for name in FIELDS}
        return cls(ttl=int(raw["ttl"]), created=int(raw["created"]), due=int(raw["due"]),
                   client=raw["client"], expires=int(raw["expires"]),
                   count=int(raw["count"] or 0), generation=int(raw["generation"] or 0),
                   claim=raw["claim"], claim_expires=int(raw["claim-expires"] or 0),
                   source=raw["source"], moved=int(raw["moved"] or 0), moving=raw["moving"])

    def is_claimed(self, now_us: int) -> bool:
        return bool(self.claim) and self.claim_expires > now_us

    def entry(self, message_id: str) -> Entry:
        """The index entry this state calls for: a claimed message is available again
        at the later of its claim's expiry and its due time (never after its expiry)."""
        if self.claim and self.claim_expires:
            available = min(max(self.due, self.claim_expires), self.expires)
            return Entry(available, message_id, self.count, self.generation, CLAIMED,
                         self.expires,
                         self.claim_expires if available > self.claim_expires else 0)
        return free_entry(self.due, message_id, self.count, self.generation, self.expires)

    def move(self) -> Marker:
        """The move under way (``moving``): its marker, with the move's ``base``."""
        return Marker.parse(self.moving)

    def message(self, message_id: str, body: bytes, now_us: int) -> Message:
        """The message this state and *body* make, as read at *now_us*."""
        return Message(
            id=message_id, body=json.loads(body), ttl=self.ttl, created=self.created / US,
            expires=self.expires / US, due=self.due / US, client_id=self.client,
            claim_id=self.claim or None, claim_expires=self.claim_expires / US,
            claim_count=self.count, as_of=now_us / US, source_queue=self.source or None,
            moved_at=self.moved / US if self.moved else None)


def free_entry(due: int, message_id: str, count: int, generation: int, expires: int
               ) -> Entry:
    """The entry of a free or delayed message: available at its due time, or at its
    expiry when its delay runs past its ttl, so that listing the index up to now finds
    every expired message (a claim's expiry never passes the message's)."""
    return Entry(min(due, expires), message_id, count, generation, FREE, expires)


@dataclass(frozen=True)
class Marker:
    """A generation marker ``c/<id>/<n>``: what the request that won generation *n* of a
    message does with it (times in microseconds).

    The same, with ``base`` set, is the description of a move under way that the source
    message carries (``Record.moving``) until the move is done.
    """

    kind: str  # CLAIM, MOVE, EDIT or EXPIRE
    at: int  # when it was bid for
    claim: str | None = None  # the claim's id (a redrive's, for its moves)
    expires: int = 0  # the claim's expiry; 0 once released
    grace: int = 0
    queue: str | None = None  # a move's target queue
    ttl: int | None = None  # a dead-letter move's ttl there (None: the message keeps its)
    redrive: bool = False  # a move back by redrive, not a dead-letter move
    # An edit's new due time (None: unchanged); a claim's under a retry policy.
    due: int | None = None
    body: str | None = None  # an edit's new body, JSON (None: unchanged)
    nonce: str | None = None  # the winning bid's, once stored
    base: int | None = None  # a move's first generation in its target queue

    @property
    def target(self) -> str:
        """A move's target queue (a move marker always names one)."""
        if self.queue is None:
            raise ValueError(f"a {self.kind} marker names no target queue")
        return self.queue

    @classmethod
    def parse(cls, stored: bytes | str) -> Marker:
        """The marker of a marker object's body (or of ``Record.moving``)."""
        fields = json.loads(stored)
        return cls(kind=fields["kind"], at=fields["at"], claim=fields.get("claim"),
                   expires=fields.get("expires", 0), grace=fields.get("grace", 0),
                   queue=fields.get("queue"), ttl=fields.get("ttl"),
                   redrive=bool(fields.get("redrive")), due=fields.get("due"),
                   body=fields.get("body"), nonce=fields.get("nonce"), base=fields.get("base"))

    def stored(self) -> dict[str, Any]:
        """The stored form: the fields its kind has, always in this order."""
        if self.kind == EXPIRE:
            fields: dict[str, Any] = {"kind": self.kind, "at": self.at}
        else:
            fields = {"kind": self.kind, "claim": self.claim, "expires": self.expires,
                      "grace": self.grace, "at": self.at, "queue": self.queue,
                      "ttl": self.ttl}
            if self.redrive:
                fields["redrive"] = True
            if self.kind == EDIT:
                fields.update(due=self.due, body=self.body)
            elif self.due is not None:
                fields["due"] = self.due
        if self.nonce is not None:
            fields["nonce"] = self.nonce
        if self.base is not None:
            fields["base"] = self.base
        return fields


def encode(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
