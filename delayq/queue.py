"""Queues: reserved metadata attributes and the policies derived from them."""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from typing import Any

from delayq.message import Message

NAME_CHARACTERS = string.ascii_letters + string.digits + "_-."
MAX_NAME_LENGTH = 64
# Path segments that URLs resolve away (RFC 3986's dot segments): a client would send
# /v2/queues/../messages as /v2/messages, so no such queue could be reached.
DOT_SEGMENTS = (".", "..")

# Reserved queue attributes: the leading underscore marks them as delayq's, not the user's.
DEFAULT_MESSAGE_TTL = "_default_message_ttl"
MAX_MESSAGES_POST_SIZE = "_max_messages_post_size"
DEFAULT_MESSAGE_DELAY = "_default_message_delay"
MAX_CLAIM_COUNT = "_max_claim_count"
DEAD_LETTER_QUEUE = "_dead_letter_queue"
DEAD_LETTER_QUEUE_MESSAGES_TTL = "_dead_letter_queue_messages_ttl"
# Zaqar's: bodies posted to the queue are stored encrypted (delayq.encryption).
ENCRYPT_MESSAGES = "_enable_encrypt_messages"

RESERVED_ATTRIBUTES = (
    DEFAULT_MESSAGE_TTL,
    MAX_MESSAGES_POST_SIZE,
    DEFAULT_MESSAGE_DELAY,
    MAX_CLAIM_COUNT,
    DEAD_LETTER_QUEUE,
    DEAD_LETTER_QUEUE_MESSAGES_TTL,
    ENCRYPT_MESSAGES,
)


def is_valid_name(name: str) -> bool:
    """True for a queue name: 1 to 64 ASCII letters, digits, underscores, hyphens or
    dots, other than ``.`` and ``..``."""
    return (0 < len(name) <= MAX_NAME_LENGTH and _only_name_characters(name)
            and name not in DOT_SEGMENTS)


@functools.lru_cache(maxsize=4096)  # every request names its queue, mostly the same few
def _only_name_characters(name: str) -> bool:
    # A valid name strips to "" (str.strip, in C): cheaper than a regular expression's
    # match, though each character is looked for among the 65 allowed.
    return not name.strip(NAME_CHARACTERS)


@dataclass(frozen=True, slots=True)
class QueueFilter:
    """Which queues a listing shows, as Zaqar's ``GET /v2/queues`` filters them: names
    holding *name* (None: any), and metadata with each of *metadata*'s keys equal to
    its value (an int matches an int, never a boolean)."""

    name: str | None = None
    metadata: tuple[tuple[str, int | str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.name) or bool(self.metadata)

    def matches(self, name: str, metadata: dict[str, Any]) -> bool:
        """Whether queue *name* with *metadata* (reserved defaults filled in) is shown."""
        if self.name and self.name not in name:
            return False
        return all(key in metadata and _equal(metadata[key], wanted)
                   for key, wanted in self.metadata)


def _equal(value: Any, wanted: int | str) -> bool:
    """Whether metadata *value* is filter value *wanted*: a number equal to an int (a
    boolean is none), or the same string."""
    if isinstance(value, bool):
        return False
    if isinstance(wanted, int):
        return isinstance(value, int | float) and value == wanted
    return value == wanted


@dataclass(frozen=True, slots=True)
class QueuePage:
    """A page of a queue listing: ``(name, metadata)`` pairs, and the marker of the next
    page (None when the listing is over)."""

    queues: list[tuple[str, dict[str, Any]]]
    next_marker: str | None


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """Where a claim sends a message that has been claimed ``max_claim_count`` times."""

    max_claim_count: int
    queue: str
    messages_ttl: int | None = None


def dead_letter_policy(metadata: dict[str, Any]) -> DeadLetterPolicy | None:
    """The queue's dead-letter policy, or None when it has none."""
    count = metadata.get(MAX_CLAIM_COUNT)
    target = metadata.get(DEAD_LETTER_QUEUE)
    if count is None or target is None:
        return None
    return DeadLetterPolicy(count, target, metadata.get(DEAD_LETTER_QUEUE_MESSAGES_TTL))


def dead_lettered_ttl(messages_ttl: int | None, ttl: int, created: int, moved: int,
                      second: int) -> tuple[int, int]:
    """The ttl and expiry of a message moved to a dead-letter queue at *moved*.

    With ``_dead_letter_queue_messages_ttl`` (*messages_ttl*) the message lives that long
    from the move; without, it keeps its original expiry ``created + ttl``, whatever
    claims extended it to. Times are integers in units of which *second* make a second.
    """
    if messages_ttl is None:
        return ttl, created + ttl * second
    return messages_ttl, moved + messages_ttl * second


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """A queue's live messages by state, without the oldest and newest of QueueStats."""

    free: int
    claimed: int
    delayed: int

    @property
    def total(self) -> int:
        return self.free + self.claimed + self.delayed


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of a queue's live messages; ``total`` counts free, claimed and delayed."""

    free: int
    claimed: int
    delayed: int
    oldest: Message | None
    newest: Message | None

    @property
    def total(self) -> int:
        return self.free + self.claimed + self.delayed
