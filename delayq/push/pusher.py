"""The pusher: in each API worker process, the task that delivers subscribed queues'
messages to their webhooks, and mails them to ``mailto:`` subscribers
(``delayq.push.mail``) by the same claims.

A push is a claim made by the service on a subscription's behalf: the pusher claims a
queue's due messages for one of its subscriptions (``Broker.claim(push_for=...)``),
POSTs each (``delayq.push.webhook``), deletes it with its claim id when the subscriber
answers 2xx, and otherwise hands it back (``Broker.push_failed``), due again after the
wait its attempt earns under the retry policy. A message is thereby never pushed before
it is due, and is pushed again or dead-lettered by the same rules as any claimed
message. Nothing of a push lives only in the process: if it dies mid-push the claim
expires, the message waits its retry delay, and any process pushes it.

Every process that pushes serves every subscribed queue, and claims keep two of them
from pushing the same message (at least once: a push answered after its claim expired,
or whose delete failed, is pushed again). The subscriptions of one queue share its
messages as consumers do: each message goes to one of them, round robin.

A topic (``delayq.topics``) gives every message to every subscriber through a delivery
queue per subscription, which the pusher serves as a queue with that one subscription;
what differs for a topic's queues is ``delayq.push.fanout``'s.

When to look at a queue: the pusher keeps an agenda of (when, queue). A round every
``push_scan_interval`` lists the subscribed queues and asks each when its next message
is due (``Broker.available_in``); a post or release served by this process, or by any
process sharing a store whose writes signal (``delayq.api.wakeups``), puts its queue on
the agenda at once (``notify``), as a subscription change does for the subscriptions
(``subscriptions_changed``); and a failed push puts it back for when the
message is due again. A turn on a queue claims as many messages as the process may push
at once (``max_notifier_workers`` in all, ``max_pushes_per_subscription`` to one
subscription), and the queue goes back on the agenda at once if the claim came back
full, else for when its next message is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from delayq import errors, metrics
from delayq.broker import Broker
from delayq.claim import Claim
from delayq.message import Message
from delayq.offload import THREADS, Offload
from delayq.push import fanout, mail, sockets
from delayq.push.settings import PushSettings
from delayq.push.webhook import Webhooks, payload
from delayq.storage.base.signals import NoSignals, Signals
from delayq.subscription import Subscription

LOG = logging.getLogger(__name__)

CLAIM_GRACE = 60
# After a turn found a queue's hint stale (a message said to be due, none claimed:
# another process took it, or it expired), the queue's next look waits this long.
STALE_HINT_PAUSE = 0.05
# After the store failed a turn, the queue's next look waits this long.
STORE_FAILED_PAUSE = 1.0
SUBSCRIPTIONS_PAGE = 100

Queue = fanout.Queue  # (project, queue name)


class _SubscribedQueue:
    """What the pusher knows of one subscribed queue."""

    __slots__ = ("subscriptions", "subscriptions_current", "next_index", "in_turn",
                 "due_during_turn", "subscriptions_full", "turn_pending", "agenda_at")

    def __init__(self) -> None:
        self.subscriptions: list[Subscription] = []
        self.subscriptions_current = False  # subscriptions read since the last round
        self.next_index = 0  # the subscription whose turn is next
        self.in_turn = False  # a turn is under way
        self.due_during_turn = False  # it was due again during its turn
        # Its subscriptions had no room for one more push: its next push to end
        # brings it back.
        self.subscriptions_full = False
        self.turn_pending = False  # its turn counts as a push until it holds its own
        self.agenda_at: float | None = None  # when the agenda has it next (loop time)


@dataclass(frozen=True, slots=True)
class _Running:
    """What the pusher holds only while it runs: made by ``start``, dropped by
    ``stop``."""

    loop: asyncio.AbstractEventLoop
    wake: asyncio.Event  # set when the agenda may have work sooner than it waits for
    webhooks: Webhooks
    mailer: mail.Mailer


class Pusher:
    """Pushes the subscribed queues' messages from this process (``start``/``stop``)."""

    def __init__(self, broker: Broker, settings: PushSettings,
                 signals: Signals | None = None) -> None:
        self.broker = broker
        self.settings = settings
        # Every queue the pusher knows of is followed.
        self.signals = signals if signals is not None else NoSignals()
        self.sockets = sockets.SocketPushes()  # this process's sockets (delayq.websocket)
        self._queues: dict[Queue, _SubscribedQueue] = {}
        self._agenda: list[tuple[float, int, Queue]] = []
        self._order = itertools.count()
        self._in_flight = 0  # pushes held (claimed for, or being claimed for)
        self._pending_turns = 0  # turns started that hold no push yet: one each
        self._per_subscription: dict[str, int] = {}
        # Queues due, waiting for a free push (in order).
        self._due_queues: dict[Queue, None] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: _Running | None = None
        self._main_task: asyncio.Task[None] | None = None
        self._round_task: asyncio.Task[None] | None = None

    # Life cycle (the ASGI lifespan of the worker)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._running = _Running(loop, asyncio.Event(),
                                 Webhooks(self.settings.timeout, self.settings.in_flight,
                                          self.settings.targets),
                                 mail.Mailer(self.settings.smtp,
                                             Offload(THREADS, self.settings.in_flight)))
        self._main_task = loop.create_task(self._run(), name="delayq-pusher")

    async def stop(self) -> None:
        """Stop pushing; pushes under way are abandoned (their claims expire and their
        messages come back)."""
        tasks = [task for task in (self._main_task, self._round_task, *self._tasks)
                 if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._running is not None:
            await self._running.webhooks.close()
            self._running.mailer.offload.shutdown()
        self._main_task = self._round_task = self._running = None
        self._tasks.clear()
        for key in list(self._queues):
            self._forget(key)
        self._agenda.clear()
        self._due_queues.clear()

    def _state(self) -> _Running:
        """The running pusher's loop, wake-up event and webhooks: only its own tasks,
        and the API's calls while it runs (``notify``), get here."""
        if self._running is None:
            raise RuntimeError("The pusher is not running.")
        return self._running

    # What the API tells the pusher

    def notify(self, project: str, queue: str) -> None:
        """Messages of *queue* may be due now (a post or release this process served)."""
        if fanout.is_topic((project, queue)):
            return  # its delivery queues are notified for its publishes
        if (project, queue) in self._queues and self._running is not None:
            self._schedule((project, queue), 0.0)

    def subscriptions_changed(self, project: str, queue: str) -> None:
        """A subscription of *queue* was created, changed or deleted through this
        process: read them again, and look at the queue now."""
        if self._running is None:
            return
        known = self._know((project, queue))
        known.subscriptions_current = False
        self._schedule((project, queue), 0.0)

    def _know(self, key: Queue) -> _SubscribedQueue:
        """The pusher's state of *key*, made (and the queue followed) if new."""
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _SubscribedQueue()
            self.signals.follow(*key)
        return queue

    def _forget(self, key: Queue) -> None:
        if self._queues.pop(key, None) is not None:
            self.signals.unfollow(*key)

    # The agenda

    def _schedule(self, key: Queue, delay: float) -> None:
        """Put *key* on the agenda *delay* seconds from now, unless it is there sooner
        (a turn asks the store for the next due time anyway). The entries a sooner one
        replaces stay in the heap, and are dropped when they come up."""
        running = self._state()
        when = running.loop.time() + max(0.0, delay)
        queue = self._queues.get(key)
        if queue is None:
            return
        if queue.agenda_at is not None and queue.agenda_at <= when:
            return
        queue.agenda_at = when
        heapq.heappush(self._agenda, (when, next(self._order), key))
        running.wake.set()

    async def _run(self) -> None:
        running = self._state()
        next_round = 0.0
        while True:
            now = running.loop.time()
            if now >= next_round and (self._round_task is None or self._round_task.done()):
                # A task of its own: the agenda goes on while a round reads the store.
                self._round_task = running.loop.create_task(self._round(),
                                                            name="delayq-push-round")
                next_round = now + self.settings.scan_interval
            self._start_due()
            until = next_round
            if self._agenda:
                until = min(until, self._agenda[0][0])
            running.wake.clear()
            # asyncio.timeout, not wait_for: wait_for swallows a cancellation (stop) that
            # arrives as the event fires, and the loop would go on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, until - running.loop.time())):
                    await running.wake.wait()

    async def _round(self) -> None:
        """Read which queues are subscribed, and when each has a message due."""
        try:
            keys = await self.broker.subscribed_queues()
            keys += [delivery for key in keys if fanout.is_topic(key)
                     for delivery in await fanout.deliveries(self.broker, key, sweep=True)]
        except Exception as exc:  # noqa: BLE001 - pushing goes on; the next round asks
            log_failure("cannot list the subscribed queues", exc)
            return
        listed = set(keys)
        gone = [k for k, q in self._queues.items() if k not in listed and not q.in_turn]
        for key in gone:
            self._forget(key)
        await fanout.sweep_unlisted(self.broker, gone, listed, log_failure)
        for key in keys:
            self._know(key).subscriptions_current = False
            if fanout.is_topic(key):
                continue  # never pushed from: its delivery queues are
            try:
                due_in = await self.broker.available_in(*key)
            except errors.DelayqError:
                continue  # the next round asks again
            if due_in is not None:
                self._schedule(key, due_in)

    def _start_due(self) -> None:
        now = self._state().loop.time()
        while self._agenda and self._agenda[0][0] <= now:
            when, _, key = heapq.heappop(self._agenda)
            queue = self._queues.get(key)
            if queue is not None and queue.agenda_at == when:
                queue.agenda_at = None
                self._due_queues[key] = None
        for key in list(self._due_queues):
            if self._in_flight + self._pending_turns >= self.settings.in_flight:
                return
            del self._due_queues[key]
            queue = self._queues.get(key)
            if queue is None:
                continue
            if queue.in_turn:
                queue.due_during_turn = True
                continue
            queue.in_turn = queue.turn_pending = True
            self._pending_turns += 1
            self._spawn(self._turn(key, queue))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = self._state().loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # A turn: claim for one subscription, push what came

    async def _turn(self, key: Queue, queue: _SubscribedQueue) -> None:
        try:
            await self._claim_and_push(key, queue)
        except Exception as exc:  # noqa: BLE001 - one queue's trouble must not stop others
            log_failure(f"queue {key[1]} of project {key[0]} failed its turn", exc)
            self._schedule(key, STORE_FAILED_PAUSE)
        finally:
            self._end_pending(queue)
            queue.in_turn = False
            if queue.due_during_turn:
                queue.due_during_turn = False
                self._schedule(key, 0.0)

    async def _claim_and_push(self, key: Queue, queue: _SubscribedQueue) -> None:
        if fanout.is_topic(key):
            await fanout.serve_deliveries(self.broker, key,
                                          lambda delivery: self.subscriptions_changed(*delivery))
            return
        if not queue.subscriptions_current:
            queue.subscriptions = await self._read_subscriptions(key)
            queue.subscriptions_current = True
        subscription = self._next_subscription(queue)
        if subscription is None:
            queue.subscriptions_full = bool(queue.subscriptions)
            return
        self._end_pending(queue)
        room = min(self.settings.claim_limit, self.settings.in_flight - self._in_flight,
                   self.settings.per_subscription
                   - self._per_subscription.get(subscription.id, 0))
        if room <= 0:  # other turns took the room: back in line for the next
            self._due_queues.setdefault(key, None)
            return
        self._add_in_flight(subscription, room)
        claim: Claim | None = None
        try:
            claim = await self.broker.claim(*key, ttl=self.settings.claim_ttl,
                                            grace=CLAIM_GRACE, limit=room, push_for=subscription)
        finally:
            taken = len(claim.messages) if claim is not None else 0
            self._remove_in_flight(subscription, room - taken)
        if claim is not None:
            for message in claim.messages:
                self._spawn(self._push(key, subscription, claim.id, message))
        if taken == room:
            self._schedule(key, 0.0)  # more may be due
            return
        due_in = await self.broker.available_in(*key)
        if due_in is not None:
            self._schedule(key, due_in if taken or due_in > 0 else STALE_HINT_PAUSE)

    async def _read_subscriptions(self, key: Queue) -> list[Subscription]:
        """The queue's subscriptions that may be pushed to: one awaiting confirmation
        takes no turn, so no message is claimed, and consumed, on its behalf. A topic's
        delivery queue has its one subscription (``fanout``)."""
        if fanout.is_delivery(key):
            return await fanout.delivery_subscriptions(self.broker, key, self._pushable)
        found: list[Subscription] = []
        marker = None
        while True:
            page = await self.broker.list_subscriptions(*key, marker,
                                                        SUBSCRIPTIONS_PAGE)
            found += [s for s in page if self._pushable(s)]
            if len(page) < SUBSCRIPTIONS_PAGE:
                return found
            marker = page[-1].id

    def _pushable(self, subscription: Subscription) -> bool:
        """A socket's subscription is served only by the process holding the socket,
        and needs no confirmation: its client asked for it on that socket."""
        if sockets.is_socket(subscription.subscriber):
            return self.sockets.holds(subscription.subscriber)
        return self.broker.deliverable(subscription)

    def _next_subscription(self, queue: _SubscribedQueue) -> Subscription | None:
        """The next subscription, round robin, that may take one more push now."""
        count = len(queue.subscriptions)
        for step in range(count):
            subscription = queue.subscriptions[(queue.next_index + step) % count]
            if self._per_subscription.get(subscription.id, 0) < self.settings.per_subscription:
                queue.next_index = (queue.next_index + step + 1) % count
                return subscription
        return None

    def _end_pending(self, queue: _SubscribedQueue) -> None:
        """The turn of *queue* no longer counts as a push of its own."""
        if queue.turn_pending:
            queue.turn_pending = False
            self._pending_turns -= 1

    def _add_in_flight(self, subscription: Subscription, pushes: int) -> None:
        self._in_flight += pushes
        self._per_subscription[subscription.id] = (
            self._per_subscription.get(subscription.id, 0) + pushes)

    def _remove_in_flight(self, subscription: Subscription, pushes: int) -> None:
        if not pushes:
            return
        self._in_flight -= pushes
        left = self._per_subscription[subscription.id] - pushes
        if left:
            self._per_subscription[subscription.id] = left
        else:
            del self._per_subscription[subscription.id]
        if self._due_queues or self._agenda:
            self._state().wake.set()

    async def _push(self, key: Queue, subscription: Subscription, claim_id: str,
                    message: Message) -> None:
        try:
            if await self._deliver(subscription, key[1], message, claim_id):
                self.broker.counters.count(metrics.PUSHED, 1)
                await self.broker.delete_message(*key, message.id, claim_id)
                return
            self.broker.counters.count(metrics.PUSH_FAILURES, 1)
            wait = await self.broker.push_failed(*key, message, claim_id,
                                                 subscription)
            self._schedule(key, wait)
        except errors.DelayqError as exc:
            # The claim ends on its own and the message comes back: pushed again.
            log_failure(f"message {message.id} of queue {key[1]}", exc)
        finally:
            queue = self._queues.get(key)
            if queue is not None and queue.subscriptions_full:
                queue.subscriptions_full = False
                self._due_queues.setdefault(key, None)
            self._remove_in_flight(subscription, 1)  # wakes the agenda for the due queues

    async def _deliver(self, subscription: Subscription, queue: str, message: Message,
                       claim_id: str) -> bool:
        """Push *message* to its subscriber by the subscriber's scheme: mail to a
        ``mailto:`` one, a frame down a socket of this process (acknowledged with
        *claim_id*), a POST to a webhook."""
        running = self._state()
        queue = fanout.pushed_queue_name(queue)
        if sockets.is_socket(subscription.subscriber):
            return await self.sockets.push(subscription, queue, message, claim_id,
                                           self.settings.timeout)
        if subscription.subscriber.startswith(f"{mail.SCHEME}:"):
            return await running.mailer.send(
                mail.message_mail(subscription, payload(queue, message)))
        return await running.webhooks.push(subscription, queue, message)


def log_failure(what: str, exc: Exception) -> None:
    """Log what a push could not do: a store's unavailability or a refusal in one line,
    as the API logs them, anything else with its traceback."""
    if isinstance(exc, errors.StorageUnavailable):
        LOG.warning("Push: %s: the %s message store is unavailable: %s", what, exc.store,
                    exc.detail)
    elif isinstance(exc, errors.DelayqError):
        LOG.warning("Push: %s: %s", what, exc.description)
    else:
        LOG.error("Push: %s", what, exc_info=exc)
