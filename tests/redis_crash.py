"""Child-process work for the Redis crash tests: a driver that dies between the steps of
a cross-slot dead-letter move, of a subscription write, or of a queue creation under
the queue quota.

The subclasses change nothing but *when the process dies*: each kills itself with
SIGKILL at one boundary of the steps, as a crash would.
"""

from __future__ import annotations

import os
import signal

from delayq.broker import Broker
from delayq.storage.redis.catalogue import Catalogue, Hold
from delayq.storage.redis.driver import Driver
from delayq.storage.redis.moves import Moves
from delayq.storage.redis.subscriptions import Subscriptions
from delayq.synchronous import Synchronous
from delayq.validation import Limits


class MovesDyingAfterOutbox(Moves):
    async def complete(self, project: str, queue: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class DiesAfterOutbox(Driver):
    """Dies once the claim script has put moves in the outbox (after step 1)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.context.moves = MovesDyingAfterOutbox(self.context, self.context.moves.marker_ttl)


class MovesDyingAfterMoveIn(Moves):
    async def forget(self, outbox: str, token: bytes) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class DiesAfterMoveIn(Driver):
    """Dies once the dead-letter queue has received a move (after step 2)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.context.moves = MovesDyingAfterMoveIn(self.context,
                                                   self.context.moves.marker_ttl)


KINDS = {"after-outbox": DiesAfterOutbox, "after-move-in": DiesAfterMoveIn}


def claim_and_die(kind: str, uri: str, namespace: str, project: str, queue: str) -> None:
    """Claim *queue* (whose messages must all be dead-lettered) with a dying driver."""
    driver = KINDS[kind](uri, namespace=namespace)
    Synchronous(Broker(driver, Limits())).claim(project, queue, ttl=60, grace=60, limit=20)
    raise SystemExit("the claim finished without reaching the crash point")


class MovesCompletedLate(Moves):
    """Skips its first completion of the outbox's moves."""

    skipped = False

    async def complete(self, project: str, queue: str) -> None:
        if self.skipped:
            await super().complete(project, queue)
        self.skipped = True


class CompletesMovesLate(Driver):
    """Skips its first completion of the outbox's moves, as if a claim's moves arrived
    just after it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.late = MovesCompletedLate(self.context, self.context.moves.marker_ttl)
        self.context.moves = self.late

    @property
    def skipped(self) -> bool:
        return self.late.skipped


class SubscriptionsDyingBeforeIndexUpdate(Subscriptions):
    """Dies once a subscription write is stored, before the subscribed-queues index is
    told of it."""

    async def _update_index(self, project: str, queue: str, version: int, expires: int,
                            token: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class DiesBeforeIndexUpdate(Driver):
    """A driver whose subscription writes die before their index step."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.subscriptions = SubscriptionsDyingBeforeIndexUpdate(self.context)


def subscribe_and_die(uri: str, namespace: str, project: str, queue: str, ttl: int,
                      now: float) -> None:
    """Subscribe to *queue* with a driver that dies before the index hears of it, at
    time *now* (a fake clock's)."""
    driver = Synchronous(DiesBeforeIndexUpdate(uri, namespace=namespace, clock=lambda: now))
    driver.subscriptions.create(project, queue, "http://127.0.0.1:9/hook", ttl, {})
    raise SystemExit("the subscription finished without reaching the crash point")


class CatalogueDying(Catalogue):
    """Dies once a creation holds its name (*point* "after-hold"), or once its write is
    done, before the hold is settled ("before-settle")."""

    point = ""

    async def reserve(self, project: str, name: str, quota: int) -> Hold:
        hold = await super().reserve(project, name, quota)
        if self.point == "after-hold":
            os.kill(os.getpid(), signal.SIGKILL)
        return hold

    async def settle(self, hold: Hold, exists: bool) -> None:
        if self.point == "before-settle":
            os.kill(os.getpid(), signal.SIGKILL)
        await super().settle(hold, exists)


def create_and_die(point: str, uri: str, namespace: str, project: str, queue: str,
                   quota: int, now: float) -> None:
    """Create *queue* under the queue *quota* with a driver that dies at *point* of the
    creation, at time *now* (a fake clock's)."""
    driver = Synchronous(Driver(uri, namespace=namespace, clock=lambda: now))
    driver.context.catalogue = CatalogueDying(driver.key_names, driver._scripts,
                                              driver._now_arg)
    driver.context.catalogue.point = point
    driver.queues.create(project, queue, {}, queue_quota=quota)
    raise SystemExit("the creation finished without reaching the crash point")
