"""Child-process work for the Redis crash tests: a driver that dies between move steps.

The subclasses change nothing but *when the process dies*: each kills itself with
SIGKILL at one boundary of the cross-slot dead-letter move, as a crash would.
"""

from __future__ import annotations

import os
import signal

from delayq.broker import Broker
from delayq.storage.redis.driver import Driver
from delayq.validation import Limits


class DiesAfterOutbox(Driver):
    """Dies once the claim script has put moves in the outbox (after step 1)."""

    def _settle(self, project: str, queue: str) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class DiesAfterMoveIn(Driver):
    """Dies once the dead-letter queue has received a move (after step 2)."""

    def _forget_move(self, outbox: str, token: bytes) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


KINDS = {"after-outbox": DiesAfterOutbox, "after-move-in": DiesAfterMoveIn}


def claim_and_die(kind: str, uri: str, namespace: str, project: str, queue: str) -> None:
    """Claim *queue* (whose messages must all be dead-lettered) with a dying driver."""
    driver = KINDS[kind](uri, namespace=namespace)
    Broker(driver, Limits()).claim(project, queue, ttl=60, grace=60, limit=20)
    raise SystemExit("the claim finished without reaching the crash point")


class SettlesLate(Driver):
    """Skips its first settle, as if a claim's moves arrived just after it."""

    skipped = False

    def _settle(self, project: str, queue: str):
        if self.skipped:
            yield from super()._settle(project, queue)
        self.skipped = True
