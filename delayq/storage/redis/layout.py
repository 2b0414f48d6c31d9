"""The Redis keyspace and record format, on the Python side.

``lua/common.lua`` documents each queue's keys for the scripts, which build them from the
queue's state key; here are the names the driver makes itself and how it reads what the
scripts store:

- ``NS:{PROJECT/QUEUE}:s`` — a queue's state hash (``KeyNames.queue``); every other key of the
  queue extends its prefix ``NS:{PROJECT/QUEUE}:``, among them ``o`` (the outbox of moves
  waiting to reach another cluster slot) and ``ev`` (the event trail, a stream that
  outlives the queue). The hash tag ``{PROJECT/QUEUE}`` keeps a queue in one slot.
- ``NS:{PROJECT}:queues`` — a project's catalogue, a sorted set of its queue names, with
  siblings extending its prefix for the queue quota (``lua/catalogue_reserve.lua``).
- ``NS:projects`` — the set of projects with a catalogue, for the reaper and audits.
- ``NS:reaper`` — the reaper's lease.
- ``NS:{!subscribed}:q`` — the subscribed-queues index (``KeyNames.subscribed``), a sorted
  set of ``PROJECT/QUEUE`` (``KeyNames.subscribed_queue``), with siblings extending its
  prefix (``lua/subscribed.lua`` lists them). No percent-encoded project makes its hash
  tag, so it shares no key name with a project's.

The signals (``signals.py``) are pub/sub channels, named like keys:

- ``NS:signals`` — every process's channel (classic pub/sub, ``KeyNames.signals``):
  ``SUBSCRIPTIONS`` (rare; on a cluster Redis sends a classic message to every node).
- ``NS:{PROJECT/QUEUE}:n`` — a queue's channel (``KeyNames.signal_channel``): its
  ``MESSAGES`` signals, heard by the processes that follow the queue; classic pub/sub on
  one server, sharded pub/sub in the queue's slot on a cluster.

A signal's payload is its change (``m`` or ``s``) then ``PROJECT/QUEUE`` as the
subscribed-queues index names a queue (``signal``).

``PROJECT`` is percent-encoded (``project_part``), so no ``/``, ``{`` or ``}`` of its
own is mistaken for the key's structure. A message id is the queue's nonce (minted when
the queue is made, ``new_nonce``), the message's sequence name and its token (random,
``new_tokens``); a claim id the nonce, ``c``, the claim's number and its token
(``claim_name``). ``lua/common.lua`` says how the scripts check them. A record is a
MessagePack array (``message`` decodes it, ``subscription`` a subscription's).
"""

from __future__ import annotations

import functools
import json
import random
import secrets
import uuid
from collections.abc import Mapping
from urllib.parse import quote, unquote

import msgpack

from delayq import jsontext
from delayq.message import Message
from delayq.storage.base.signals import Change, Signal
from delayq.subscription import Subscription

US = 1_000_000
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
SEQ_LENGTH = 8
NONCE_LENGTH = 10
NONCE_DIGITS = bytes(ord(DIGITS[b % len(DIGITS)]) for b in range(256))  # byte → digit
TOKEN_LENGTH = 13  # characters of an id's token, 5 random bits each: 65 bits
TOKEN_DIGITS = bytes(ord(DIGITS[b % 32]) for b in range(256))  # byte → one of 32 digits
KEY_CACHE_SIZE = 10_000  # queues whose state-hash key a process keeps made
SUBSCRIBED_TAG = "!subscribed"  # quote() encodes "!": no project part is this

# A record's fields, as lua/common.lua packs them (due and expires relative to created):
# body, client, created, ttl, due, expires, claim, claim_expires, count, id, source,
# moved; the id's token, when the record has one, comes fifth (the only string there).
# A record written before the last ones existed gets these defaults for them.
RECORD_DEFAULTS = [b"", b"", 0, 0, 0, 0, 0, 0, 0, b"", b"", 0]
TOKEN_FIELD = 4


class KeyNames:
    """The key names of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        # (project, queue) → the queue's state key: made once, its hash computed once too.
        self._queues: dict[tuple[str, str], str] = {}

    def queue(self, project: str, name: str) -> str:
        """The state hash of a queue; every other key of the queue extends its prefix."""
        key = self._queues.get((project, name))
        if key is None:
            if len(self._queues) >= KEY_CACHE_SIZE:
                self._queues.clear()  # a miss costs only this line's formatting
            key = self._queues[(project, name)] = (
                f"{self.namespace}:{{{project_part(project)}/{name}}}:s")
        return key

    def outbox(self, project: str, name: str) -> str:
        """The hash of a queue's dead-letter moves waiting to reach another slot."""
        return self.queue(project, name)[:-1] + "o"

    def trail(self, project: str, name: str) -> str:
        """The stream of a queue's event trail (it outlives the queue)."""
        return self.queue(project, name)[:-1] + "ev"

    def catalogue(self, project: str) -> str:
        return f"{self.namespace}:{{{project_part(project)}}}:queues"

    def projects(self) -> str:
        return f"{self.namespace}:projects"

    def reaper(self) -> str:
        return f"{self.namespace}:reaper"

    def subscribed(self) -> str:
        """The subscribed-queues index: queues by the expiry of their latest live
        subscription. Its siblings extend its prefix: ``v`` (the subscription version
        of each queue's entry), ``r`` (reservations of writes in progress)."""
        return f"{self.namespace}:{{{SUBSCRIBED_TAG}}}:q"

    def subscribed_versions(self) -> str:
        """The hash of every queue the subscribed-queues index has had an entry of."""
        return self.subscribed()[:-1] + "v"

    @staticmethod
    def subscribed_queue(project: str, name: str) -> str:
        """A queue as the subscribed-queues index names it."""
        return f"{project_part(project)}/{name}"

    @staticmethod
    def subscribed_owner(entry: str) -> tuple[str, str]:
        """``(project, queue)`` of a name ``subscribed_queue`` made."""
        project, _, queue = entry.partition("/")
        return unquote(project), queue

    def signals(self) -> str:
        """The channel every process listens to."""
        return f"{self.namespace}:signals"

    def signal_channel(self, project: str, name: str) -> str:
        """A queue's channel (on a cluster, its shard channel, in the queue's slot)."""
        return self.queue(project, name)[:-1] + "n"

    def trail_pattern(self, project: str | None) -> str:
        """A SCAN pattern of the trails of *project*'s queues (every project's: None)."""
        scope = project_part(project) if project is not None else "*"
        return f"{self.namespace}:{{{scope}/*}}:ev"

    def trail_owner(self, key: str) -> tuple[str, str]:
        """``(project, queue)`` of a key ``trail`` made."""
        inside = key[len(self.namespace) + 2:-len("}:ev")]
        project, _, queue = inside.partition("/")
        return unquote(project), queue


@functools.lru_cache(maxsize=4096)  # every key of a request names its project
def project_part(project: str) -> str:
    """A project id as it appears in keys: percent-encoded."""
    return quote(project, safe="")


CHANGES = {change.value.encode(): change for change in Change}


def signal(payload: bytes) -> Signal | None:
    """The signal a channel message carries (``lua/common.lua``, ``signal``); None for
    a payload of no known change."""
    change = CHANGES.get(payload[:1])
    if change is None:
        return None
    project, queue = KeyNames.subscribed_owner(payload[1:].decode())
    return Signal(change, project, queue)


@functools.lru_cache(maxsize=4096)  # a producer posts with the same Client-ID again
def client_bytes(client_id: str) -> bytes:
    """A Client-ID as stored: the 16 bytes of a UUID (the API admits no other), else text.

    Text that is 16 bytes long gets a NUL appended, so that length means a UUID.
    """
    try:
        return uuid.UUID(client_id).bytes
    except ValueError:
        raw = client_id.encode()
        return raw + b"\0" if len(raw) == 16 else raw


@functools.lru_cache(maxsize=4096)  # a claim's messages often share their producer
def client_text(raw: bytes) -> str:
    if len(raw) == 16:
        return str(uuid.UUID(bytes=raw))
    return (raw[:-1] if len(raw) == 17 and raw.endswith(b"\0") else raw).decode()


def new_nonce() -> str:
    """A random prefix for the ids minted by one incarnation of a queue.

    A post makes one (used only if the queue is new), so it must be cheap: bytes from the
    random module (no system call; it reseeds from the system after a fork, so gunicorn's
    workers draw apart), each mapped to a digit in C. The nonce is no secret (every
    message id shows it), only unique. 256 is not a multiple of 36, so the first 4 digits
    are a little likelier (8/256 against 7/256): 51 of the 51.7 bits of a uniform nonce,
    plenty to keep incarnations apart.
    """
    return (random.getrandbits(NONCE_LENGTH * 8).to_bytes(NONCE_LENGTH, "little")
            .translate(NONCE_DIGITS).decode())


def new_tokens(count: int) -> bytes:
    """The id tokens of *count* messages (or one claim), ``TOKEN_LENGTH`` characters
    each, back to back: the part of an id that no client can tell from other ids.

    From the system's CSPRNG (the Lua scripts have none: Redis seeds their
    ``math.random`` the same every time), one call per post; each byte gives a digit of
    32, all equally likely (256 is a multiple of 32), so a token holds 65 random bits.
    """
    return secrets.token_bytes(TOKEN_LENGTH * count).translate(TOKEN_DIGITS)


def seq_name(n: int) -> str:
    """*n* as ``lua/common.lua``'s ``seq_name`` writes it: ``SEQ_LENGTH`` base-36 digits."""
    digits = []
    for _ in range(SEQ_LENGTH):
        n, digit = divmod(n, 36)
        digits.append(DIGITS[digit])
    return "".join(reversed(digits))


def claim_name(number: int, raw: bytes) -> bytes:
    """What follows ``<nonce>c`` in the id of claim *number*, whose stored record is
    *raw* (``lua/common.lua``, ``decode_claim``): its number in base 36 and its token, or,
    for a claim stored before claims had tokens, its number in decimal."""
    fields = msgpack.unpackb(raw, raw=True)
    if len(fields) > 4 and len(fields[4]) == TOKEN_LENGTH:
        return seq_name(number).encode() + fields[4]
    return str(number).encode()


def is_sequence_name(marker: str) -> bool:
    """Whether *marker* is a message's sequence name (the marker listings handed out
    before their markers were decimal positions)."""
    return len(marker) == SEQ_LENGTH and not marker.strip(DIGITS)


# The lengths of message ids: nonce, seq and token; without the token for the messages
# stored before ids had tokens.
ID_LENGTHS = frozenset((NONCE_LENGTH + SEQ_LENGTH + TOKEN_LENGTH, NONCE_LENGTH + SEQ_LENGTH))
SEQ_LIMIT = 36 ** SEQ_LENGTH  # the first position past every sequence name


def is_message_id(text: str) -> bool:
    """Whether *text* is shaped like a message id of this driver (whether or not a message
    has it); ``lua/common.lua``'s ``locate`` finds which one does."""
    return len(text) in ID_LENGTHS and not text.strip(DIGITS)


def message(nonce: bytes, seq: bytes, raw: bytes, as_of: int,
            claims: Mapping[int, bytes] | None = None) -> Message:
    """The message a record holds, read at *as_of* (microseconds): a record as a script
    hands it over (its claim named), or, with *claims* (claim number → ``claim_name``;
    a claim not in it is over), as stored."""
    fields = msgpack.unpackb(raw, raw=True)
    token = b""
    if len(fields) > TOKEN_FIELD and type(fields[TOKEN_FIELD]) is bytes:
        token = fields.pop(TOKEN_FIELD)
    if len(fields) < len(RECORD_DEFAULTS):  # a record written with fewer fields
        fields += RECORD_DEFAULTS[len(fields):]
    (body, client, created, ttl, due, expires, claim, claim_expires, count, id_, source,
     moved) = fields  # in the order of RECORD_DEFAULTS
    if claims is not None and claim:
        claim = claims.get(claim, 0)
    # Positional, in Message's field order: by keyword, each of the 13 arguments costs a
    # name match, and a claim builds a Message per message it takes.
    return Message(
        (id_ or nonce + seq + token).decode(),
        jsontext.loads(body.decode("utf-8", "surrogatepass")),
        ttl,
        created / US,
        (created + ttl * US + expires) / US,
        (created + due) / US,
        client_text(client),
        f"{nonce.decode()}c{claim.decode()}" if claim else None,
        claim_expires / US,
        count,
        as_of / US,
        source.decode() or None,
        moved / US if moved else None,
    )


def messages(nonce: bytes, pairs: list, as_of: int) -> list[Message]:
    """The messages of a reply's ``seq, record, seq, record, ...``."""
    return [message(nonce, pairs[i], pairs[i + 1], as_of) for i in range(0, len(pairs), 2)]


def subscription(id_: bytes, queue: str, raw: bytes, as_of: int) -> Subscription:
    """The subscription a stored record holds (``lua/common.lua``, "Subscriptions"),
    read at *as_of* (microseconds)."""
    subscriber, ttl, options, created, expires, *confirmed = msgpack.unpackb(raw, raw=True)
    # A record written before confirmation existed has no sixth field: confirmed.
    return Subscription(id_.decode(), queue, subscriber.decode(), ttl, json.loads(options),
                        created / US, expires / US, as_of / US,
                        confirmed=bool(confirmed[0]) if confirmed else True)
