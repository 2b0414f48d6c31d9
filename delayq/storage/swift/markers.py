"""The Swift driver's generation-marker protocol: claims, dead-letter moves, redrives,
edits and expiries, each won by bidding for a message's next generation marker.

The n+1-th change of a message's generation is the one request whose bid (``objects``)
creates ``c/<id>/<n+1>`` (``layout.Marker``); every racer reads the same winner.

Claim
    List the queue's availability index (``a/``) up to now: the claimable messages, oldest
    first. For each, create its next generation marker ``c/<id>/<n+1>`` conditionally:
    of concurrent claimers exactly one wins the bid, and that marker *is* the claim, claim
    count included. The winner then rewrites the message's state headers and moves its
    index entry to the claim's expiry, or to its due time when that is later (new entry
    first, old one deleted after). Under a retry policy the marker also carries the due
    time the claim sets (the claim's expiry plus the policy's wait), so that whoever
    completes the claim sets the same. A claimer that loses (412) looks at the markers
    and repairs a stale entry left by a process that died half way (``repair``), so
    nothing stays stuck. What the claim's holder does afterwards is ``claims.py``'s.
Dead-letter move
    The n+1-th marker says "move" instead. The winner first marks the source message as
    moving (a header), then copies it into the dead-letter queue's container
    (``If-None-Match: *``, same id), writes its index entry there, and only then deletes
    it from the source. Every read of the source that meets a message marked moving
    completes the move first and does not report it (``finish_move``); a claim that meets
    the stale index entry of a move whose mover died completes it too. Every step can be
    repeated, so a process dying anywhere loses nothing, and a message is never read in
    both queues. A redrive moves a message back the same way.
Edit
    The n+1-th marker says "edit" and carries the edit (new due time, new body), so the
    result is the same whoever completes it. The editor bids like a claimer, for a
    message whose record shows no live claim; the winner rewrites the message (``PUT``
    when the body changes, else a ``POST`` of its state) at generation n+1 and moves its
    index entry. A claimer that meets the stale entry of an edit whose editor died loses
    its bid and completes the edit (``repair``); an edit is never counted as a claim.
Expiry
    Every read compares expiry with now: an expired message is never shown, counted,
    claimed, edited, redriven or deleted. It stays stored (``X-Delete-At`` is its expiry
    plus ``expired_retention``) until delayq removes it, so that it is reported once
    (``expired`` event, ``endings``, tallies): Swift has no delete-if (two racing DELETEs
    may both get 204), so the right to remove and report it is the marker
    ``c/<id>/<n+1>`` of kind ``expire``, bid for like a claim's (``expire``). Claims (and
    pops) bid for the expired messages they meet at the head of the index, so the next
    ones do not meet them again; the reaper (``expiry.py``) for every queue's. Losers
    repair the entry as a claim's loser does; a claim that won the generation first keeps
    the message, which was live when it bid. An entry's availability is never after its
    message's expiry (``layout.free_entry``), so listing the index up to now finds every
    expired message. A message being moved is completed by ``finish_move``, never reaped.
    Left: a ``DELETE ?ids=`` that read a message just before it expired and a removal of
    it may both report it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from swiftclient.exceptions import ClientException

from delayq import errors, events
from delayq.message import NO_CHANGE, Message, Unchanged
from delayq.queue import DeadLetterPolicy, dead_lettered_ttl
from delayq.retry import Backoff
from delayq.storage.swift import layout as lay
from delayq.storage.swift.layout import US, Entry, Marker, Record
from delayq.storage.swift.objects import Objects, is_status
from delayq.storage.swift.recorder import Recorder
from delayq.storage.swift.tallies import Tallies

CLAIM_BATCH = 32  # index entries read per listing while claiming or redriving
# A repairer meeting an expire marker (beyond the record) completes the removal only once
# the marker is this old (µs of the driver's clock): before, its winner is alive and
# deleting, and the winner reports the expiry only when its DELETE found the message.
EXPIRY_ABANDONED = 60 * 1_000_000
# Bids an edit makes for a message that other requests keep changing before it answers
# 409: each lost bid means another claim, move or edit of it won meanwhile.
EDIT_ATTEMPTS = 5

Taken = tuple[str, Record, bytes, Record]  # (id, new record, body, old record) of a claim


@dataclass(frozen=True)
class Moved:
    """A dead-letter move (or redrive) this request won and completed."""

    message_id: str
    record: Record  # the source's record, marked moving
    body: bytes
    move: Marker  # the move's marker: target queue, ttl, time

    def dead_lettered(self, project: str, queue: str, now: int) -> events.Event:
        """The event of a dead-letter move, for the source's trail, with the message as
        the target queue holds it."""
        ttl, expires = dead_lettered(self.record, self.move)
        return Recorder.event(project, queue, events.DEAD_LETTERED, now,
                           message_id=self.message_id, claim_count=self.record.count,
                           source=queue, target=self.move.queue, ttl=ttl,
                           expires=expires / US, body=self.body.decode())

    def redriven(self, project: str, queue: str, now: int) -> events.Event:
        """The event of a redrive, for the source's trail."""
        return Recorder.event(project, queue, events.REDRIVEN, now, message_id=self.message_id,
                           claim_count=self.record.count, source=queue,
                           target=self.move.queue, expires=self.record.expires / US)


class Lost:
    """What a claim attempt gives when another claimer won the message's marker."""


LOST = Lost()


def dead_lettered(record: Record, move: Marker) -> tuple[int, int]:
    """The ttl and expiry (µs) of a message the *move* takes to its queue."""
    return dead_lettered_ttl(move.ttl, record.ttl, record.created, move.at, US)


def arrival(queue: str, record: Record, move: Marker) -> tuple[Record, int]:
    """The record a *move* (or redrive) gives the message leaving *queue* as *record*, in
    its new queue, and when it is available there (µs)."""
    base = move.base or 0
    if move.redrive:
        moved = Record(ttl=record.ttl, created=record.created, due=min(record.due, move.at),
                       client=record.client, expires=record.expires, generation=base)
        return moved, moved.due
    ttl, expires = dead_lettered(record, move)
    return Record(ttl=ttl, created=record.created, due=record.due, client=record.client,
                  expires=expires, count=record.count, generation=base, source=queue,
                  moved=move.at), move.at


def claimed(record: Record, claim: Marker, count: int, generation: int) -> Record:
    """The record after the *claim* marker of *generation*, the message's *count*-th
    claim: the same for the claimer and for whoever completes the claim after it died."""
    return Record(**{**vars(record), "count": count, "generation": generation,
                     "claim": claim.claim or "", "claim_expires": claim.expires,
                     "due": record.due if claim.due is None else claim.due,
                     "expires": max(record.expires, claim.expires + claim.grace * US)})


def edited(record: Record, edit: Marker, generation: int) -> Record:
    """The record after the *edit* marker of *generation*: the same for every process
    that applies it to the same record."""
    result = Record(**{**vars(record), "generation": generation})
    if edit.due is not None:
        # A message edited is free: a claim that expired no longer sets when it is
        # available, its new due time does (its claim count stays).
        result.due = edit.due
        result.claim = ""
        result.claim_expires = 0
    return result


class Markers:
    """The protocol's steps, for the queues of one driver."""

    def __init__(self, objects: Objects, tallies: Tallies, recorder: Recorder,
                 ensure_queue: Callable[[str, str, dict[str, Any]], bool]) -> None:
        """*ensure_queue* creates a queue (a dead-letter queue a move is the first to
        use), as ``Queues.create`` does."""
        self._objects = objects
        self._tallies = tallies
        self._recorder = recorder
        self._ensure_queue = ensure_queue

    # Claims

    def take(self, project: str, queue: str, now: int, limit: int, claim_id: str,
             claim_expires: int, grace: int, dead_letter: DeadLetterPolicy | None,
             backoff: Backoff | None = None
             ) -> tuple[list[Taken], list[Moved], list[events.Event]]:
        """Claim up to *limit* claimable messages; ``(id, new record, body, old record)``
        of each, the dead-letter moves made on the way, and the ``expired`` events of the
        expired messages met on the way that this request removed. With *backoff*, each
        is due ``backoff.after(its claim count)`` after *claim_expires*."""
        container = self._objects.container(project, queue)
        taken: list[Taken] = []
        moved: list[Moved] = []
        expired: list[events.Event] = []
        after = lay.INDEX_PREFIX
        end = lay.index_end(now)
        dlq_ready = False
        contended = False
        entries: list[Entry] = []
        while len(taken) < limit:
            if not entries:
                names = self._objects.names(container, lay.INDEX_PREFIX, marker=after,
                                            end=end, limit=CLAIM_BATCH)
                if not names:
                    break
                after = names[-1]
                entries = [e for e in map(Entry.parse, names) if e is not None]
            if contended:
                # Other claimers bid for the same oldest entries: going on in order would
                # meet them again at every step, each loss costing every loser a round of
                # requests. At random through the rest of the batch, most bids win.
                random.shuffle(entries)
            if dead_letter and not dlq_ready and any(
                    e.count >= dead_letter.max_claim_count for e in entries):
                self._ensure_queue(project, dead_letter.queue, {})
                dlq_ready = True
            # No more attempts at once than messages still wanted: each success is a
            # claim (and a claim count) that cannot be taken back.
            attempt, entries = entries[:limit - len(taken)], entries[limit - len(taken):]
            for result in self._objects.parallel(
                    lambda e: self._take_one(project, queue, e, now, claim_id, claim_expires,
                                             grace, dead_letter, backoff), attempt):
                if isinstance(result, Lost):
                    contended = True
                elif isinstance(result, Moved):
                    moved.append(result)
                elif isinstance(result, events.Event):
                    expired.append(result)
                elif result is not None:
                    taken.append(result)
        return taken, moved, expired

    def _take_one(self, project: str, queue: str, entry: Entry, now: int, claim_id: str,
                  claim_expires: int, grace: int, dead_letter: DeadLetterPolicy | None,
                  backoff: Backoff | None) -> Taken | Moved | Lost | events.Event | None:
        objects = self._objects
        container = objects.container(project, queue)
        message_id = entry.message_id
        if entry.expires <= now:
            # Removed here (reported once, by the winner of its expire marker), so that
            # the next claims do not meet it again.
            return self.expire(project, queue, entry, now)
        move_to = (dead_letter if dead_letter is not None
                   and entry.count >= dead_letter.max_claim_count else None)
        move = move_to is not None
        # The marker carries the due time the claim sets, so that whoever completes the
        # claim of a claimer that died sets the same.
        due = (None if move or backoff is None
               else claim_expires + backoff.after(entry.count + 1) * US)
        marker = Marker(kind=lay.MOVE if move else lay.CLAIM, at=now, claim=claim_id,
                        expires=claim_expires, grace=grace,
                        queue=move_to.queue if move_to else None,
                        ttl=move_to.messages_ttl if move_to else None, due=due)
        won = self._win(project, queue, entry, marker, now)
        if not isinstance(won, tuple):
            return won
        before, body = won
        if move:
            return self._move(project, queue, entry, before, body, marker, now)
        record = claimed(before, marker, entry.count + 1, entry.generation + 1)
        self._tallies.tally(project, queue, before, record)  # the bid won made it a claim
        objects.write_record(container, message_id, record)
        if not objects.move_entry(container, message_id, entry, record.entry(message_id)):
            # Deleted (without a claim id) while being claimed: that delete counted the
            # end of the state it read, unclaimed (a delete without a claim id refuses
            # a claimed message).
            self._tallies.tally(project, queue, record, before)
            return None
        return message_id, record, body, before

    def _win(self, project: str, queue: str, entry: Entry, marker: Marker, now: int
             ) -> tuple[Record, bytes] | Lost | None:
        """Bid for the next generation of *entry*'s message with *marker*: the message's
        record and body when won, LOST (after repairing the entry) when another took it,
        None when the message is gone."""
        objects = self._objects
        container = objects.container(project, queue)
        message_id = entry.message_id
        won = objects.bid(container, lay.marker_name(message_id, entry.generation + 1),
                          marker.stored(), {"X-Delete-At": objects.marker_until(entry.expires)})
        if not won:
            self.repair(project, queue, entry, now)
            return LOST
        found = objects.read(container, message_id)
        if found is None:  # deleted (or expired) since the listing
            objects.delete(container, entry.name)
        return found

    # Moves

    def _move(self, project: str, queue: str, entry: Entry, before: Record, body: bytes,
              marker: Marker, now: int) -> Moved:
        """Complete the move (or redrive) whose *marker* this request won."""
        message_id = entry.message_id
        move = self._moving(project, message_id, marker)
        moving = Record(**{**vars(before), "count": entry.count,
                           "moving": json.dumps(move.stored())})
        # Counted by the winner, in both queues: whoever completes the move counts nothing.
        self._tallies.tally(project, queue, before, None)
        self._tallies.tally(project, move.target, None, arrival(queue, moving, move)[0])
        self._objects.write_record(self._objects.container(project, queue), message_id,
                                   moving)
        self.finish_move(project, queue, message_id, moving, body, move, now, entry)
        return Moved(message_id, moving, body, move)

    def _moving(self, project: str, message_id: str, marker: Marker) -> Marker:
        """The move's description kept on the source record until the move is done.

        It fixes the generation the message starts from in the dead-letter queue: past
        any markers an earlier stay there left (a message can come back to a queue
        through a cycle of dead-letter policies), so its first claim there is not taken
        for one of its old ones.
        """
        target = self._objects.container(project, marker.target)
        old = self._objects.names(target, lay.marker_prefix(message_id))
        return replace(marker, base=lay.generation_of(old[-1]) if old else 0)

    def finish_move(self, project: str, queue: str, message_id: str, record: Record,
                    body: bytes, move: Marker, now: int, met: Entry | None = None) -> None:
        """Copy the message into the dead-letter queue, then delete it from *queue*.

        Every step can be repeated: the copy is conditional, the entry's name depends
        only on the marker, deletes of absent objects are fine. A message whose
        dead-letter expiry has passed by the time the move completes is just deleted.
        *met* is the source index entry the mover met, when it knows it.
        """
        objects = self._objects
        source = objects.container(project, queue)
        target = objects.container(project, move.target)
        moved, available = arrival(queue, record, move)
        entry = lay.free_entry(available, message_id, moved.count, moved.generation,
                               moved.expires)
        expires = moved.expires
        if expires > now:
            headers = {**moved.headers(), "X-Delete-At": objects.stored_until(expires)}
            try:
                objects.create(target, lay.message_name(message_id), body, headers)
            except ClientException as exc:
                if not is_status(exc, 404):
                    raise
                self._ensure_queue(project, move.target, {})
                objects.create(target, lay.message_name(message_id), body, headers)
            objects.put_entry(target, entry)
        self.leave_source(source, message_id, record, met)

    def leave_source(self, source: str, message_id: str, record: Record,
                     met: Entry | None) -> None:
        """The last step of a move: delete the message and its index entries from *source*.

        Entries first, the message last: until the message is gone it stays marked moving,
        and whoever meets it completes the move again.
        """
        for name in {record.entry(message_id).name, *([met.name] if met else [])}:
            self._objects.delete(source, name)
        self._objects.delete(source, lay.message_name(message_id))

    def redrive(self, project: str, queue: str, now: int, destination: str | None,
                limit: int, redrive_id: str, prepare: Callable[[], None] | None = None
                ) -> list[Moved]:
        """Move up to *limit* messages of *queue* back to *destination* (None: each to the
        queue it was dead-lettered from), bidding for each like a claim. *prepare* runs
        once before the first bid (the destination's creation under the queue quota,
        which may refuse the redrive): a bid won is a move that cannot be taken back."""
        objects = self._objects
        container = objects.container(project, queue)
        moved: list[Moved] = []
        after = lay.INDEX_PREFIX
        while len(moved) < limit:
            names = objects.names(container, lay.INDEX_PREFIX, marker=after, limit=CLAIM_BATCH)
            if not names:
                break
            after = names[-1]
            # Entries of live claims are skipped; delayed ones are taken.
            entries = [e for e in map(Entry.parse, names)
                       if e is not None and not e.is_claimed(now)]
            if entries and prepare is not None:
                prepare()
                prepare = None
            while entries and len(moved) < limit:
                # No more moves at once than still wanted: each won bid is a move.
                take = min(objects.concurrency, limit - len(moved))
                batch, entries = entries[:take], entries[take:]
                moved += [result for result in objects.parallel(
                    lambda e: self._redrive_one(project, queue, e, now, redrive_id,
                                                destination), batch)
                          if isinstance(result, Moved)]
        return moved

    def _redrive_one(self, project: str, queue: str, entry: Entry, now: int,
                     redrive_id: str, destination: str | None) -> Moved | Lost | None:
        """Move one message back, bidding for its next generation like a claim."""
        objects = self._objects
        container = objects.container(project, queue)
        message_id = entry.message_id
        if entry.expires <= now:
            return None  # a claim or the object expirer takes care of it
        found = objects.read(container, message_id)
        if found is None:
            objects.delete(container, entry.name)  # left by a move that a reader completed
            return None
        if found[0].moving:
            # A move (or redrive) whose mover died: completed here, entry included.
            self.finish_move(project, queue, message_id, found[0], found[1],
                             found[0].move(), now, entry)
            return None
        if found[0].expires <= now:
            return None
        target = destination or found[0].source
        if not target:
            return None  # never dead-lettered: it stays unless a destination is given
        marker = Marker(kind=lay.MOVE, at=now, claim=redrive_id, expires=0, grace=0,
                        queue=target, redrive=True)
        won = self._win(project, queue, entry, marker, now)
        if not isinstance(won, tuple):
            return won
        return self._move(project, queue, entry, *won, marker, now)

    # Edits

    def edit(self, project: str, queue: str, message_id: str, body: Any | Unchanged,
             delay: float | None, now_us: Callable[[], int]) -> Message:
        """Edit the message (``Messages.edit``), bidding for its next generation, again
        while other requests keep winning it, up to ``EDIT_ATTEMPTS`` times."""
        objects = self._objects
        container = objects.container(project, queue)
        for _ in range(EDIT_ATTEMPTS):
            now = now_us()
            record, old_body = self._editable(project, queue, message_id, now)
            generation = record.generation + 1
            marker = Marker(kind=lay.EDIT, at=now,
                            due=None if delay is None else now + round(delay * US),
                            body=None if body is NO_CHANGE else lay.encode(body).decode())
            if objects.bid(container, lay.marker_name(message_id, generation),
                           marker.stored(),
                           {"X-Delete-At": objects.marker_until(record.expires)}):
                counted = edited(record, marker, generation)
                self._tallies.tally(project, queue, record, counted)
                result = self._complete_edit(container, message_id, record, old_body,
                                             marker, generation, record.entry(message_id))
                if result is None:
                    # Deleted meanwhile: the delete counted the end of the state it read,
                    # most likely the one before this edit.
                    self._tallies.tally(project, queue, counted, record)
                    raise errors.MessageNotFound.with_id(message_id)
                self._recorder.record(project, queue, now, [self._recorder.event(
                    project, queue, events.EDITED, now, message_id=message_id,
                    due=result[0].due / US, claim_count=result[0].count)])
                return result[0].message(message_id, result[1], now)
            # Another claim, move or edit took this generation: bring the record up to
            # date with it (completing it if its maker died), then look again.
            self.repair(project, queue, record.entry(message_id), now)
            time.sleep(objects.settle_time)
        raise errors.Conflict(f"Message {message_id} is being changed by other requests; "
                              "retry.")

    def _editable(self, project: str, queue: str, message_id: str, now: int
                  ) -> tuple[Record, bytes]:
        """The message's record and body, when an edit may bid for it now; raises
        MessageNotFound (absent, expired, or moving away) or MessageHeld."""
        container = self._objects.container(project, queue)
        found = (self._objects.read(container, message_id) if lay.is_message_id(message_id)
                 else None)
        if found is not None and found[0].moving:
            self.finish_move(project, queue, message_id, found[0], found[1],
                             found[0].move(), now)
            found = None
        if found is None or found[0].expires <= now:
            raise errors.MessageNotFound.with_id(message_id)
        if found[0].is_claimed(now):
            raise errors.MessageHeld.editing(message_id)
        return found

    def _complete_edit(self, container: str, message_id: str, record: Record, body: bytes,
                       edit: Marker, generation: int, met: Entry
                       ) -> tuple[Record, bytes] | None:
        """Apply the won *edit* marker to the message read as *record* and *body*, then
        move its index entry from *met*; the new record and body, or None when the
        message is gone (deleted meanwhile)."""
        objects = self._objects
        result = edited(record, edit, generation)
        if edit.body is None:
            objects.write_record(container, message_id, result)
        else:
            body = edit.body.encode()
            # Swift has no conditional overwrite: a PUT would bring back a message a
            # delete has just removed, so absence is checked first (operator guide).
            if not objects.exists(container, lay.message_name(message_id)):
                objects.delete(container, met.name)
                return None
            objects.put_message(container, message_id, result, body)
        if not objects.move_entry(container, message_id, met, result.entry(message_id)):
            return None
        return result, body

    # Expiry

    def expire(self, project: str, queue: str, entry: Entry, now: int
               ) -> events.Event | None:
        """Remove the message of *entry*, an index entry whose expiry has passed, when it
        has indeed expired; its ``expired`` event when this request is the one to report
        it: the winner of its ``expire`` marker, whose DELETE found the message.

        Swift has no delete-if: two racing DELETEs may both answer 204, so a DELETE alone
        cannot tell who reports. The marker bid can: claims and reapers that meet the
        same expired message bid for its next generation, and only one wins it (a claim
        or move that won it first leaves the message to live on, as it should).
        """
        objects = self._objects
        container = objects.container(project, queue)
        message_id = entry.message_id
        record = objects.read_record(container, message_id)
        if record is None:
            objects.delete(container, entry.name)  # its message was removed or moved
            return None
        if record.moving or record.expires > now:
            # A move to complete, or an entry older than the record (a claim extended the
            # message's expiry): brought in line like any stale entry.
            self.repair(project, queue, entry, now)
            return None
        if not objects.bid(container, lay.marker_name(message_id, record.generation + 1),
                           Marker(kind=lay.EXPIRE, at=now).stored(),
                           {"X-Delete-At": objects.marker_until(record.expires)}):
            # Another reaper or claim removes it; or a claim, move or edit won the
            # generation before the record showed it (its maker may have died).
            self.repair(project, queue, entry, now)
            return None
        if not self._remove(container, message_id, record, entry):
            return None  # deleted by another request (a delete by ids that read it live)
        self._tallies.tally(project, queue, record, None)
        return self._recorder.event(project, queue, events.EXPIRED, record.expires,
                                 message_id=message_id, claim_count=record.count,
                                 expires=record.expires / US)

    def _remove(self, container: str, message_id: str, record: Record, met: Entry) -> bool:
        """Delete an expired message, then its index entries; False if it was gone.

        The message first: an entry left by a process dying in between points at
        nothing and is dropped by whoever meets it, while a message left without an entry
        would be found by no reaper.
        """
        found = self._objects.delete(container, lay.message_name(message_id))
        for name in {record.entry(message_id).name, met.name}:
            self._objects.delete(container, name)
        return found

    # Repairs

    def repair(self, project: str, queue: str, entry: Entry, now: int) -> None:
        """Bring a stale index entry in line with the message's markers and record.

        A process that died between winning a marker and updating the message leaves the
        record and entry a generation behind: this completes what the marker says (a claim
        is honoured until its expiry, a move is finished). A leftover old entry is
        replaced by the one the record calls for.
        """
        objects = self._objects
        container = objects.container(project, queue)
        message_id = entry.message_id
        found = objects.read(container, message_id)
        if found is None:
            objects.delete(container, entry.name)
            return
        record, body = found
        markers = objects.names(container, lay.marker_prefix(message_id))
        generation = lay.generation_of(markers[-1]) if markers else 0
        if generation > record.generation and not record.moving:
            latest = objects.get(container, markers[-1], newest=True)
            if latest is None:
                return
            marker = Marker.parse(latest[1])
            if now - marker.at < objects.settle_time * US:
                return  # a bid still settling: its winner is alive and finishes the job
            if marker.kind == lay.EXPIRE:
                # Its winner removes the message and reports it; one that died before
                # its DELETE left the rest to whoever comes much later, uncounted.
                if now - marker.at >= EXPIRY_ABANDONED:
                    self._remove(container, message_id, record, entry)
                return
            # Every generation past the record's was a claim, but a final move or edit
            # (an edit bids only for the generation right after a record it read).
            claims = generation - record.generation - (marker.kind != lay.CLAIM)
            record = Record(**{**vars(record), "count": record.count + claims})
            if marker.kind == lay.EDIT:
                # An editor that died after winning: its edit is completed as it would.
                self._complete_edit(container, message_id, record, body, marker, generation,
                                    entry)
                return
            if marker.kind == lay.MOVE:
                record.moving = json.dumps(self._moving(project, message_id, marker).stored())
            else:
                record = claimed(record, marker, record.count, generation)
            objects.write_record(container, message_id, record)
        if record.moving:
            self.finish_move(project, queue, message_id, record, body, record.move(), now,
                             entry)
            return
        objects.move_entry(container, message_id, entry, record.entry(message_id))
