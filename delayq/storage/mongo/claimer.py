"""The MongoDB driver's claimer, which takes messages: a claim's (or a pop's) bulk write
of pinned single-document updates, the dead-letter moves and redrives made the same way,
and the read that tells which of them applied.

MongoDB updates one document atomically and re-checks an update's filter against the
document it writes, so each update's filter pins the state read (``pinned``):

- A claim reads the head of the queue's claimable range (``layout.CLAIMABLE_INDEX``),
  then writes one ``UpdateOne`` per candidate — in one ``bulk_write`` — filtered on the
  candidate's queue, availability and claim count as read. Of two concurrent claimers the
  second finds the document changed and updates nothing; the claim then reads the head
  again until it has its limit or the range is empty. The claim-count increment is part of
  the claiming update, and so is, under a retry policy, the due time the message waits
  for should the claim end (``due_again``).
- A dead-letter move is one such update that rewrites the message's queue (every queue of
  every project lives in the one ``messages`` collection), keeping its claim count: the
  message is in exactly one queue before and after, whatever dies when. A redrive is the
  same update back (or to another queue), the message arriving there fresh.
- A bulk write that applied fewer updates than it sent is followed by one read of those
  messages (``Claimer.won``): a concurrent claim, move or delete won the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId
from pymongo import UpdateOne
from pymongo.collection import Collection

from delayq.queue import DeadLetterPolicy, dead_lettered_ttl
from delayq.retry import Backoff
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo import tallies

# Reserve count sequence numbers of a queue, creating it if needed: (project, queue,
# count, now, queue_quota=...) -> the first; a creation refused past queue_quota (0:
# none) raises QuotaExceeded.
Allocate = Callable[..., int]
# Delete each of the documents that has expired at now: (docs, now) -> those deleted.
ReapEach = Callable[[list[dict[str, Any]], int], list[dict[str, Any]]]


@dataclass(frozen=True)
class Move:
    """A dead-letter move a claim attempts: the message as read, and what it becomes."""

    doc: dict[str, Any]
    target: str  # the dead-letter queue (for a redrive, the queue it goes back to)
    position: int  # its position in the target queue, reserved for this move only
    ttl: int
    expires: int  # ms


@dataclass
class Taken:
    """What one ``Claimer.take`` did: each message's document as it was just before (its
    state pinned by the update's filter)."""

    claimed: list[dict[str, Any]] = field(default_factory=list)
    moved: list[Move] = field(default_factory=list)
    reaped: list[dict[str, Any]] = field(default_factory=list)  # expired, removed here
    # Claimed, then deleted by a concurrent request (a bulk delete by id takes a held
    # message) before this one could see its claim: in the tallies, not in the answer.
    vanished: list[dict[str, Any]] = field(default_factory=list)


class Claimer:
    """Takes messages by pinned bulk writes to the ``messages`` collection.

    *allocate* reserves positions in a queue (``Database.allocate``); *reap_each* removes the
    expired messages a claim meets (``Expiry.reap_each``).
    """

    def __init__(self, messages: Collection, allocate: Allocate, reap_each: ReapEach
                 ) -> None:
        self._messages = messages
        self._allocate = allocate
        self._reap_each = reap_each

    def take(self, project: str, queue: str, now: int, limit: int, claim_id: ObjectId,
             claim_expires: int, grace: int, dead_letter: DeadLetterPolicy | None,
             backoff: Backoff | None = None) -> Taken:
        """Claim up to *limit* claimable messages under *claim_id*, oldest availability
        first, dead-lettering by *dead_letter* on the way, and remove the expired
        messages met on the way (the caller reports them). With *backoff*, each claimed
        message is due its wait after *claim_expires* (``claim_due``).
        """
        took = Taken()
        while len(took.claimed) < limit:
            need = limit - len(took.claimed)
            candidates = list(
                self._messages.find({lay.PROJECT: project, lay.QUEUE: queue,
                                     lay.AVAILABLE: {"$lte": lay.date(now)}})
                .sort(lay.CLAIMABLE_ORDER).limit(need).hint(lay.CLAIMABLE_INDEX))
            if not candidates:
                break
            expired, worn_out, fresh = [], [], []
            for doc in candidates:
                if lay.ms(doc[lay.EXPIRES]) <= now:
                    expired.append(doc)
                elif dead_letter and doc.get(lay.CLAIM_COUNT, 0) >= dead_letter.max_claim_count:
                    worn_out.append(doc)
                else:
                    fresh.append(doc)
            # They head the range until removed: removed here, and counted, not left to
            # every claim to read again.
            took.reaped += self._reap_each(expired, now)
            moves = (self._moves(project, worn_out, dead_letter, now)
                     if dead_letter and worn_out else [])
            ops = [move_op(project, queue, move, now) for move in moves]
            ops += [UpdateOne(pinned(project, queue, doc), claiming(
                claim_id, claim_expires, grace, claim_due(doc, claim_expires, backoff)))
                for doc in fresh]
            if not ops:
                continue
            result = self._messages.bulk_write(ops, ordered=False)
            if result.modified_count == len(ops):
                took.claimed += fresh
                took.moved += moves
                continue
            # A concurrent claim, move or delete won some: keep those this claim got.
            won = self.won(project, claim_id, fresh, moves, result.modified_count)
            took.claimed += won.claimed
            took.moved += won.moved
            took.vanished += won.vanished
        return took

    def redrive(self, project: str, queue: str, docs: list[dict[str, Any]],
                destination: str | None, now: int, queue_quota: int = 0) -> list[Move]:
        """Move the message documents *docs* of *queue* to *destination*, or each back to
        the queue it was dead-lettered from; the moves that applied.

        Each target queue is created (and positions reserved in it) first, as for a
        dead-letter move; *destination* only under *queue_quota*, and refused there
        (QuotaExceeded) before anything moves.
        """
        moves = []
        for target in sorted({destination or doc[lay.SOURCE] for doc in docs}):
            group = [doc for doc in docs if (destination or doc[lay.SOURCE]) == target]
            first = self._allocate(project, target, len(group), now,
                                   queue_quota=queue_quota if destination else 0)
            moves += [Move(doc, target, position, doc[lay.TTL], lay.ms(doc[lay.EXPIRES]))
                      for position, doc in enumerate(group, start=first)]
        if not moves:
            return []
        result = self._messages.bulk_write(
            [redrive_op(project, queue, move, now) for move in moves], ordered=False)
        if result.modified_count != len(moves):
            # A concurrent claim, move or delete took some first.
            moves = self.won(project, ObjectId(), [], moves, result.modified_count).moved
        return moves

    def won(self, project: str, claim_id: ObjectId, fresh: list[dict[str, Any]],
            moves: list[Move], applied: int) -> Taken:
        """Which of a bulk write's claims and moves applied, when only *applied* of them
        did.

        A claim applied if the message bears its claim id; a move if the message is in the
        dead-letter queue at the position reserved for that move alone. A message deleted
        since bears nothing: whether the write reached it before the delete, only the
        count of writes applied tells. Such a claim is in ``vanished``, such a move in
        ``moved`` (it was made, and the dead-letter queue's delete reports the end).
        """
        ids = [doc[lay.ID] for doc in fresh] + [move.doc[lay.ID] for move in moves]
        now_in = {doc[lay.ID]: doc for doc in self._messages.find(
            {lay.ID: {"$in": ids}, lay.PROJECT: project},
            {lay.QUEUE: 1, lay.CLAIM: 1, lay.SEQ: 1})}

        def landed(move: Move) -> bool:
            state = now_in.get(move.doc[lay.ID], {})
            return (state.get(lay.QUEUE), state.get(lay.SEQ)) == (move.target, move.position)

        won = Taken(
            claimed=[doc for doc in fresh
                     if now_in.get(doc[lay.ID], {}).get(lay.CLAIM) == claim_id],
            moved=[move for move in moves if landed(move)])
        unseen = max(0, applied - len(won.claimed) - len(won.moved))
        # When some of two or more were deleted before the write and some after, the
        # count does not tell which: the first ones are taken, claims before moves. Among
        # claims alone the counts stay right now (each was free and due) and may be off
        # by those messages until their expiry, as after a crash between a write and its
        # tally.
        won.vanished = [doc for doc in fresh if doc[lay.ID] not in now_in][:unseen]
        won.moved += [move for move in moves
                      if move.doc[lay.ID] not in now_in][:unseen - len(won.vanished)]
        return won

    def _moves(self, project: str, docs: list[dict[str, Any]], policy: DeadLetterPolicy,
               now: int) -> list[Move]:
        """The dead-letter moves of *docs*, each with its position in the dead-letter
        queue and its ttl and expiry there.

        The dead-letter queue is created (and positions reserved in it) first, so a
        moved message never lands in a queue that does not exist.
        """
        first = self._allocate(project, policy.queue, len(docs), now)
        moves = []
        for position, doc in enumerate(docs, start=first):
            ttl, expires = dead_lettered_ttl(policy.messages_ttl, doc[lay.TTL],
                                             lay.ms(doc[lay.CREATED]), now, 1000)
            moves.append(Move(doc, policy.queue, position, ttl, expires))
        return moves


def claiming(claim_id: ObjectId, claim_expires: int, grace: int, due: int | None
             ) -> dict[str, Any]:
    """The update that claims a message under *claim_id* until *claim_expires* (ms),
    living *grace* seconds more, due at *due* (ms) unless None."""
    changes = {} if due is None else {lay.DUE: lay.date(due)}
    return {"$set": {lay.CLAIM: claim_id, lay.CLAIM_EXPIRES: lay.date(claim_expires),
                     lay.AVAILABLE: lay.date(lay.available(claim_expires, due)), **changes},
            "$inc": {lay.CLAIM_COUNT: 1},
            "$max": {lay.EXPIRES: lay.date(claim_expires + grace * 1000)}}


def claimed(doc: dict[str, Any], claim_id: ObjectId, claim_expires: int, grace: int,
            backoff: Backoff | None) -> dict[str, Any]:
    """The message document *doc* as ``Claimer.take``'s update leaves it."""
    return lay.applied(doc, claiming(claim_id, claim_expires, grace,
                                     claim_due(doc, claim_expires, backoff)))


def due_again(backoff: Backoff | None, attempt: int, ended: int) -> int | None:
    """When a message whose attempt *attempt* (its claim count) ends at *ended* (ms) is
    due again under *backoff*: the wait ``backoff.after(attempt)`` later; None without
    a backoff (its due time stays)."""
    return None if backoff is None else ended + backoff.after(attempt) * 1000


def claim_due(doc: dict[str, Any], claim_expires: int, backoff: Backoff | None
              ) -> int | None:
    """The due time (ms, or None: unchanged) a claim until *claim_expires* gives the
    message document *doc* as read: the wait of the attempt the claim makes."""
    return due_again(backoff, doc.get(lay.CLAIM_COUNT, 0) + 1, claim_expires)


def pinned(project: str, queue: str, doc: dict[str, Any]) -> dict[str, Any]:
    """A filter that matches *doc* only while it is in the state it was read in.

    Every claim changes availability and claim count, every move changes the queue,
    every edit the edit count: a claimer that lost a race updates nothing, and one
    that won returns the body it read (an edit cannot slip in between). The expiry
    and claim expiry are pinned too, so the tallies' change is from the very state
    written over. The due time need not be: every write of it changes a pinned field
    too (an edit its edit count, a claim, renewal, release or hand-back the claim
    expiry, a redrive the queue).
    """
    return {lay.ID: doc[lay.ID], lay.PROJECT: project, lay.QUEUE: queue,
            lay.AVAILABLE: doc[lay.AVAILABLE], lay.CLAIM_COUNT: doc.get(lay.CLAIM_COUNT),
            lay.EXPIRES: doc[lay.EXPIRES], lay.CLAIM_EXPIRES: doc.get(lay.CLAIM_EXPIRES),
            lay.EDITS: doc.get(lay.EDITS)}


def move_op(project: str, queue: str, move: Move, now: int) -> UpdateOne:
    """The single-document update of a dead-letter move, pinned like a claim."""
    return UpdateOne(pinned(project, queue, move.doc), {
        "$set": {lay.QUEUE: move.target, lay.SEQ: move.position, lay.AVAILABLE: lay.date(now),
                 lay.SOURCE: queue, lay.MOVED: lay.date(now), lay.TTL: move.ttl,
                 lay.EXPIRES: lay.date(move.expires)},
        "$unset": {lay.CLAIM: "", lay.CLAIM_EXPIRES: ""}})


def redrive_op(project: str, queue: str, move: Move, now: int) -> UpdateOne:
    """The single-document update of a redrive, pinned like a claim: a fresh message of
    the target queue, due at once."""
    return UpdateOne(pinned(project, queue, move.doc), {
        "$set": {lay.QUEUE: move.target, lay.SEQ: move.position, lay.AVAILABLE: lay.date(now),
                 **due_at_once(move, now)},
        "$unset": {lay.CLAIM: "", lay.CLAIM_EXPIRES: "", lay.CLAIM_COUNT: "", lay.SOURCE: "",
                   lay.MOVED: ""}})


def due_at_once(move: Move, now: int) -> dict[str, Any]:
    """What a redrive sets of the due time: *now*, if the message is not due yet."""
    doc = move.doc
    return {lay.DUE: lay.date(now)} if lay.DUE in doc and lay.ms(doc[lay.DUE]) > now else {}


def tally_changes(queue: str, took: Taken, claim_id: ObjectId, claim_expires: int,
                  grace: int, backoff: Backoff | None = None) -> tallies.Changes:
    """The tally changes of what ``Claimer.take`` did (as read: pinned)."""
    changes = tallies.Changes()
    for doc in took.reaped:
        changes.add(queue, doc, None)
    for doc in took.claimed + took.vanished:
        changes.add(queue, doc, claimed(doc, claim_id, claim_expires, grace, backoff))
    for move in took.moved:
        changes.add(queue, move.doc, None)
        changes.add(move.target, None,
                    lay.unclaimed(move.doc, **{lay.EXPIRES: lay.date(move.expires)}))
    return changes
