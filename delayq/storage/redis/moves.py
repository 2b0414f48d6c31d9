"""Dead-letter moves to a queue in another cluster slot, completed through the source
queue's outbox (``Driver``'s docstring tells the steps).

The claim and redrive scripts move a message into the outbox (step 1); ``complete``
copies each into its dead-letter queue (``move_in``, which remembers the move's token,
so doing it twice applies it once: step 2) and then deletes it from the outbox (step 3).
A process dying between the steps leaves the outbox entry, which the next operation on
the source queue (or the reaper) completes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgpack

from delayq.storage.redis.layout import new_nonce

if TYPE_CHECKING:
    from delayq.storage.redis.context import Context


class Moves:
    """The moves across slots of one Redis driver."""

    def __init__(self, context: Context, marker_ttl: int) -> None:
        self.context = context
        self.marker_ttl = marker_ttl

    async def complete(self, project: str, queue: str) -> None:
        """Complete every dead-letter move waiting in *queue*'s outbox.

        Each move is copied into its dead-letter queue once (``move_in`` remembers the
        token), then deleted from the outbox; any process may do it, any number of times.
        """
        outbox = self.context.key_names.outbox(project, queue)
        moves = await self.context.calls.command("HGETALL", outbox)
        for token, payload in moves.items():
            target, record = msgpack.unpackb(payload, raw=True)
            await self.move_in(project, target.decode(), token, record)
            await self.forget(outbox, token)

    async def move_in(self, project: str, target: str, token: bytes, record: bytes
                      ) -> None:
        """Step 2 of a move across slots: the dead-letter queue receives the message."""
        context = self.context
        _received, listed = await context.scripts.move_in.call(
            [context.key_names.queue(project, target)],
            [context.now_arg(), token, new_nonce(), record, self.marker_ttl])
        if not listed:
            await context.catalogue.list_queue(project, target)

    async def forget(self, outbox: str, token: bytes) -> None:
        """Step 3 of a move across slots: the source's outbox lets go of it."""
        await self.context.calls.command("HDEL", outbox, token)
