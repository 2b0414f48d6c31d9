"""The MongoDB driver's signals (``delayq.storage.base.signals``): one change stream per
process, on delayq's database, whose events are the writes themselves
(``change_events.py``: which, and what each says). Nothing is written to signal.

- **A thread of its own.** pymongo's change stream only blocks. A dedicated thread reads
  it (not the driver's pool, whose threads serve requests: this one blocks for as long
  as the process listens) with ``try_next`` and ``max_await_time_ms``, so it sees the
  stop flag of a cancelled ``listen`` within ``POLL_MS``. It hands what it reads to the
  event loop (``loop.call_soon_threadsafe``), in batches: whatever arrived while the
  loop was busy is delivered at once, duplicates (a post of many messages) once.
- **Queues an event does not name.** A release, a hand-back or an edit of the delay
  tells only the message's ``_id`` (``change_events.py``). The loop looks those up,
  batched: one ``find`` by ``_id`` for every such event that arrived while the previous
  look-up ran. Not ``fullDocument: updateLookup``: the server would read the whole
  document (body included) once per event and per listening process, and whether it
  does so only for the events the ``$match`` keeps depends on the server version; here
  only ``p`` and ``q`` are read, for those events alone. The look-up runs in the
  driver's pool whatever ``storage_calls`` says: nothing here runs on the loop. A
  message gone meanwhile (claimed and deleted) needs no wake-up.
- **Subscriptions' updates and deletes** tell only the subscription's ``_id``, and a
  deleted one cannot be looked up. The thread keeps the queue of every subscription id:
  read once when the stream opens (after opening it, so no insert falls between), kept
  up by the inserts the stream brings. An id it does not know (which that order makes
  rare) signals ``SUBSCRIPTIONS`` for every queue the process follows: the pusher reads
  those queues' subscriptions again.
- **Resuming.** pymongo resumes a stream once by itself after a network error or an
  election; when that fails too, ``listen`` raises and ``delayq.api.wakeups`` listens
  again after its pause, from the last event's resume token, so the events of the gap
  still arrive (unless the oplog no longer has them: then from now, the gap covered by
  the poll intervals).
- **No change streams** (a standalone ``mongod``, or mongomock in the tests): ``listen``
  logs it once and waits until cancelled, like ``NoSignals``; other processes' writes
  are then seen on ``claim_wait_poll_interval`` (long-poll) and ``push_scan_interval``
  (pushes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

import pymongo.errors
from pymongo.collection import Collection
from pymongo.database import Database as MongoDatabase

from delayq.offload import Offload
from delayq.storage.base import signals as base
from delayq.storage.base.signals import Change, Receive, Signal
from delayq.storage.mongo import change_events
from delayq.storage.mongo import layout as lay
from delayq.storage.mongo.change_events import Unresolved

LOG = logging.getLogger(__name__)

# How long one wait of the stream's thread for events lasts (a getMore's
# maxAwaitTimeMS): the longest a cancelled ``listen`` leaves the thread running.
POLL_MS = 500

# Server error codes that mean "this deployment has no change streams".
NO_CHANGE_STREAMS = frozenset({
    40573,  # "The $changeStream stage is only supported on replica sets": a standalone
    40324,  # Unrecognized pipeline stage name: a server (or emulation) without them
    115,  # CommandNotSupported
})
# The resume token is no use: the oplog moved past it, or it names another stream.
TOKEN_LOST = frozenset({
    286,  # ChangeStreamHistoryLost
    280,  # ChangeStreamFatalError
    260,  # InvalidResumeToken
})

# Signal SUBSCRIPTIONS for every queue the process follows (a subscription the thread
# does not know the queue of changed).
EVERY_FOLLOWED = "every followed queue"

Item = Signal | Unresolved | str


class NoChangeStreams(Exception):
    """The deployment cannot open a change stream (why: the message)."""


class Signals(base.Signals):
    """The change stream of database *db*; *offload* runs the look-ups of the queues
    events do not name."""

    def __init__(self, db: MongoDatabase, offload: Offload) -> None:
        super().__init__()
        self._db = db
        self._messages: Collection = db[lay.MESSAGES]
        self._subscriptions: Collection = db[lay.SUBSCRIPTIONS]
        self._offload = offload
        self._resume_token: Any = None  # the last event's, kept across a failure
        self._without: str | None = None  # why there are no change streams, once known

    async def listen(self, receive: Receive) -> None:
        loop = asyncio.get_running_loop()
        if self._without is None:
            lookups = _Lookups(self._offload, self._queues_of, receive)
            inbox = _Inbox(loop, lambda items: self._deliver(items, receive, lookups))
            stop = threading.Event()
            ended: asyncio.Future[None] = loop.create_future()
            threading.Thread(target=self._read, args=(inbox, stop, loop, ended),
                             name="delayq-mongo-signals", daemon=True).start()
            try:
                await ended
                return
            except NoChangeStreams as exc:
                self._without = str(exc)
                LOG.warning("MongoDB has no change streams here (%s): waiters see other "
                            "processes' writes every claim_wait_poll_interval, and pushes "
                            "every push_scan_interval. Run a replica set or a sharded "
                            "cluster for wake-ups within milliseconds.", exc)
            finally:
                stop.set()
                inbox.close()
                lookups.close()
        await loop.create_future()  # no change streams: until cancelled, as NoSignals

    # On the event loop

    def _deliver(self, items: list[Item], receive: Receive, lookups: _Lookups) -> None:
        for item in dict.fromkeys(items):
            if isinstance(item, Signal):
                receive(item)
            elif isinstance(item, Unresolved):
                lookups.add(item)
            else:  # EVERY_FOLLOWED
                for project, queue in self.following():
                    receive(Signal(Change.SUBSCRIPTIONS, project, queue))

    def _queues_of(self, pending: list[Unresolved]) -> dict[Any, tuple[str, str]]:
        """``_id`` -> ``(project, queue)`` of the messages of *pending* still stored
        (blocking)."""
        where: dict[str, Any] = {lay.ID: {"$in": [item.id for item in pending]}}
        projects = {item.project for item in pending if item.project is not None}
        if len(projects) == len({item.project for item in pending}):
            # Sharded on p, the events named the projects: ask only their shards.
            where[lay.PROJECT] = {"$in": sorted(projects)}
        return {doc[lay.ID]: (doc[lay.PROJECT], doc[lay.QUEUE])
                for doc in self._messages.find(where, {lay.PROJECT: 1, lay.QUEUE: 1})}

    # In the stream's thread

    def _read(self, inbox: _Inbox, stop: threading.Event, loop: asyncio.AbstractEventLoop,
              ended: asyncio.Future[None]) -> None:
        """Read the change stream until *stop*; settle *ended* with how it ended."""
        failure: Exception | None = None
        try:
            self._stream(inbox, stop)
        except Exception as exc:  # noqa: BLE001 - handed to listen, which raises it
            failure = exc
        if stop.is_set() or (isinstance(failure, pymongo.errors.OperationFailure)
                             and failure.code in TOKEN_LOST):
            # Stopped, or the oplog moved past the token: the next listen starts from
            # then (a gap the poll intervals cover).
            self._resume_token = None
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
            loop.call_soon_threadsafe(_settle, ended, failure)

    def _stream(self, inbox: _Inbox, stop: threading.Event) -> None:
        if not callable(getattr(type(self._db), "watch", None)):
            raise NoChangeStreams(f"{type(self._db).__module__} has no change streams")
        try:
            stream = self._db.watch(change_events.pipeline(), max_await_time_ms=POLL_MS,
                                    resume_after=self._resume_token)
        except pymongo.errors.OperationFailure as exc:
            if exc.code in NO_CHANGE_STREAMS:
                raise NoChangeStreams(str(exc)) from exc
            raise
        except NotImplementedError as exc:
            raise NoChangeStreams(str(exc) or "not implemented") from exc
        with stream:
            subscriptions = _SubscriptionQueues(self._subscriptions)
            # Not alive once invalidated (the database dropped): try_next would then
            # return None at once, forever.
            while stream.alive and not stop.is_set():
                event = stream.try_next()
                self._resume_token = stream.resume_token
                if event is None:
                    continue
                item = subscriptions.resolve(event, change_events.translate(event))
                if item is not None:
                    inbox.put(item)
            if not stream.alive:
                # An invalidated stream cannot be resumed: the next listen starts anew.
                self._resume_token = None


class _SubscriptionQueues:
    """The queue of every subscription id (the thread's own: updates and deletes of
    subscriptions name only the id). Read when made; kept up by ``resolve``."""

    def __init__(self, collection: Collection) -> None:
        # Once per stream opened; subscriptions are few and small. (_id, p, q) only.
        self._queues = {doc[lay.ID]: (doc[lay.PROJECT], doc[lay.QUEUE]) for doc in
                        collection.find({}, {lay.PROJECT: 1, lay.QUEUE: 1})}

    def resolve(self, event: dict[str, Any], item: Signal | Unresolved | None
                ) -> Item | None:
        """*item*, the translation of *event*, with a subscription's queue filled in
        from memory (``EVERY_FOLLOWED`` when unknown)."""
        written = change_events.subscription_queue(event)
        if written is not None:
            self._queues[written[0]] = written[1]
        if not (isinstance(item, Unresolved) and item.change is Change.SUBSCRIPTIONS):
            return item
        queue = (self._queues.pop(item.id, None) if item.deleted
                 else self._queues.get(item.id))
        if queue is None:
            return EVERY_FOLLOWED
        return Signal(Change.SUBSCRIPTIONS, *queue)


class _Inbox:
    """Items handed from the stream's thread to the loop: the first of a batch schedules
    *deliver* on the loop, which takes every item put meanwhile."""

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 deliver: Callable[[list[Item]], None]) -> None:
        self._loop = loop
        self._deliver = deliver
        self._lock = threading.Lock()
        self._items: list[Item] = []
        self._closed = False

    def close(self) -> None:
        """Deliver nothing more: ``listen`` has ended (on the loop)."""
        self._closed = True

    def put(self, item: Item) -> None:
        with self._lock:
            self._items.append(item)
            first = len(self._items) == 1
        if first:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
                self._loop.call_soon_threadsafe(self._flush)

    def _flush(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        if not self._closed:
            self._deliver(items)


class _Lookups:
    """The messages whose queue an event did not name, looked up on the loop: one
    ``find`` for all those that arrived while the previous one ran."""

    def __init__(self, offload: Offload,
                 queues_of: Callable[[list[Unresolved]], dict[Any, tuple[str, str]]],
                 receive: Receive) -> None:
        self._offload = offload
        self._queues_of = queues_of
        self._receive = receive
        self._pending: dict[Hashable, Unresolved] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, item: Unresolved) -> None:
        self._pending[item.id] = item
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._pending.clear()

    async def _run(self) -> None:
        while self._pending:
            batch, self._pending = list(self._pending.values()), {}
            try:
                found = await self._offload.in_thread(self._queues_of, batch)
            except Exception as exc:  # noqa: BLE001 - a lost signal costs a poll interval
                LOG.debug("Looking up the queues of %d changed messages failed: %s",
                          len(batch), exc)
                continue
            for item in batch:
                stored = found.get(item.id)
                if stored is not None:
                    self._receive(Signal(Change.MESSAGES, item.project or stored[0],
                                         item.queue or stored[1]))


def _settle(ended: asyncio.Future[None], failure: Exception | None) -> None:
    if ended.done():
        return
    if failure is None:
        ended.set_result(None)
    else:
        ended.set_exception(failure)
