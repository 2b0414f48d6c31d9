"""Claims: a consumer's lease on a batch of messages."""

from __future__ import annotations

from dataclasses import dataclass

from delayq.message import Message


@dataclass(frozen=True, slots=True)
class Claim:
    """A live claim as read at backend time ``as_of``, with the messages it holds."""

    id: str
    ttl: int
    grace: int
    created: float
    expires: float
    as_of: float
    messages: list[Message]

    @property
    def age(self) -> int:
        return max(0, int(self.as_of - self.created))
