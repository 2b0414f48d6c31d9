"""Claims: a consumer's lease on a batch of messages."""

from __future__ import annotations

from dataclasses import dataclass

from delayq import errors
from delayq.message import Message


@dataclass(slots=True)  # read-only, though not frozen: see delayq.message
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


# Why a delete of one message is refused: the rule every driver applies (the Redis
# driver's delete script returns these codes).
DELETE_ALLOWED, MESSAGE_IS_CLAIMED, MESSAGE_NOT_CLAIMED, CLAIM_MISMATCH = range(4)


def delete_refusal(claim_id: str | None, holder: str | None) -> int:
    """Whether a delete with *claim_id* may remove a message held by live claim *holder*.

    Without a claim id only an unclaimed message may go; with one, only a message that
    claim holds now.
    """
    if claim_id is None:
        return MESSAGE_IS_CLAIMED if holder is not None else DELETE_ALLOWED
    if holder is None:
        return MESSAGE_NOT_CLAIMED
    return DELETE_ALLOWED if holder == claim_id else CLAIM_MISMATCH


def refuse_delete(refusal: int, message_id: str, claim_id: str | None) -> None:
    """Raise the API error for *refusal*; nothing for DELETE_ALLOWED."""
    if refusal == MESSAGE_IS_CLAIMED:
        raise errors.MessageIsClaimed(
            f"Message {message_id} is claimed; delete it with its claim_id.")
    if refusal == MESSAGE_NOT_CLAIMED:
        raise errors.MessageNotClaimed(
            "A claim was specified, but the message is not currently claimed "
            "(the claim may have expired).")
    if refusal == CLAIM_MISMATCH:
        raise errors.ClaimMismatch(
            f"Message {message_id} is held by another claim, not {claim_id}.")
