"""Messages: what a producer posts and what the storage drivers hand back.

Times are POSIX seconds (floats) taken from the storage backend's clock, so every API
process agrees on when a message is due, whatever its own clock says.

These records (and ``Claim``) are read-only by convention, not frozen dataclasses: a
frozen dataclass sets each field through ``object.__setattr__``, several times slower to
build, and a request builds one for every message it returns.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Unchanged(enum.Enum):
    """The type of ``NO_CHANGE``: an edit leaves this field as it is.

    A sentinel, not None, because None (JSON null) is a valid message body.
    """

    NO_CHANGE = "no change"


NO_CHANGE = Unchanged.NO_CHANGE


@dataclass(slots=True)  # read-only, though not frozen: see the module docstring
class NewMessage:
    """A message ready to store: its delay and ttl already resolved by the broker.

    The driver stamps it with the backend's ``now``: ``created = now``,
    ``due = now + delay`` (the delay-expiry timestamp ``d``), ``expires = now + ttl``.
    """

    body: Any
    ttl: int
    #: Seconds, in whole milliseconds (a ``deliver_at`` gives a fraction).
    delay: float = 0


@dataclass(slots=True)  # read-only, though not frozen: see the module docstring
class Message:
    """A stored message as read at backend time ``as_of``."""

    id: str
    body: Any
    ttl: int
    created: float
    expires: float
    due: float
    client_id: str
    claim_id: str | None
    claim_expires: float
    claim_count: int
    as_of: float
    source_queue: str | None = None
    moved_at: float | None = None

    @property
    def age(self) -> int:
        return max(0, int(self.as_of - self.created))

    @property
    def is_claimed(self) -> bool:
        return self.claim_id is not None and self.claim_expires > self.as_of

    @property
    def is_delayed(self) -> bool:
        """Not claimable until its due time, and no live claim holds it (a claim made
        under a retry policy sets the due time after its own expiry)."""
        return self.as_of < self.due and not self.is_claimed

    @property
    def live_claim_id(self) -> str | None:
        """The id of the claim holding the message now, or None."""
        return self.claim_id if self.is_claimed else None


@dataclass(frozen=True, slots=True)
class ListingMarker:
    """Where a message listing starts (``validation.listing_marker`` reads it): after
    *position*, a place in the queue's post order as a listing's next link hands it out
    (0: the start), or, when *message_id* is given, after that message, as a Zaqar client
    names it."""

    position: int = 0
    message_id: str | None = None


LISTING_START = ListingMarker()  # the marker of a first page
