"""The queues of the Redis driver: each a state hash (``layout.KeyNames.queue``), listed in
its project's catalogue (``catalogue.py``)."""

from __future__ import annotations

import json
from typing import Any

from delayq import errors
from delayq.queue import QueueStats
from delayq.storage import base
from delayq.storage.redis import layout
from delayq.storage.redis.client import unavailable
from delayq.storage.redis.context import METADATA_CACHE_SIZE, Context
from delayq.storage.redis.scripts import READ_REAP_BUDGET


class Queues(base.Queues):
    """Queues in Redis."""

    def __init__(self, context: Context) -> None:
        self.context = context

    async def create(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> bool:
        with unavailable:
            return await self.context.catalogue.create_queue(
                project, name, json.dumps(metadata), queue_quota)

    async def get(self, project: str, name: str) -> dict[str, Any] | None:
        context = self.context
        with unavailable:
            raw = await context.calls.command("HGET", context.key_names.queue(project, name),
                                              "meta")
        return json.loads(raw) if raw is not None else None

    async def for_write(self, project: str, name: str
                        ) -> tuple[dict[str, Any] | None, Any]:
        """From this process's cache when it has the queue: the post or claim script
        compares the token (the metadata as read) with the stored metadata, so a post
        or claim costs one round trip instead of two."""
        context = self.context
        key = context.key_names.queue(project, name)
        cached = context.metadata.get(key)
        if cached is None:
            with unavailable:
                raw = await context.calls.command("HGET", key, "meta")
            if raw is None:
                return None, None
            if len(context.metadata) >= METADATA_CACHE_SIZE:
                context.metadata.clear()  # crude, but a miss costs only the read above
            cached = context.metadata[key] = (json.loads(raw), raw)
        return cached

    async def set_metadata(self, project: str, name: str, metadata: dict[str, Any]
                           ) -> None:
        context = self.context
        context.forget_metadata(project, name)
        with unavailable:
            done = await context.scripts.queue_update.call(
                [context.key_names.queue(project, name)], ["meta", json.dumps(metadata)])
        if not done:
            raise errors.QueueNotFound.named(name)

    async def delete(self, project: str, name: str) -> None:
        self.context.forget_metadata(project, name)
        with unavailable:
            # Unlist first: a post racing the delete then either lands before the drop
            # (and goes with it) or re-creates and re-lists the queue.
            await self.context.catalogue.unlist(project, name)
            await self._drop(project, name, "delete")

    async def purge(self, project: str, name: str) -> None:
        with unavailable:
            await self._drop(project, name, "purge")

    async def _drop(self, project: str, name: str, how: str) -> None:
        """Empty (or delete) a queue; dead-letter moves it started still complete."""
        context = self.context
        await context.moves.complete(project, name)
        if await context.scripts.queue_drop.call([context.key_names.queue(project, name)],
                                                 [how, context.now_arg()]):
            await context.moves.complete(project, name)  # a concurrent claim's moves

    async def page(self, project: str, marker: str | None, limit: int
                   ) -> list[tuple[str, dict[str, Any]]]:
        context = self.context
        found: list[tuple[str, dict[str, Any]]] = []
        start = f"({marker}" if marker else "-"
        with unavailable:
            while len(found) < limit:
                names = await context.calls.command(
                    "ZRANGEBYLEX", context.key_names.catalogue(project), start, "+", "LIMIT", 0,
                    limit - len(found))
                if not names:
                    break
                metadata = await context.calls.batch(*(
                    ("HGET", context.key_names.queue(project, name.decode()), "meta")
                    for name in names))
                for name, raw in zip(names, metadata, strict=True):
                    # A queue whose delete crashed half-way is listed but gone: skip it.
                    if raw is not None:
                        found.append((name.decode(), json.loads(raw)))
                start = f"({names[-1].decode()}"
        return found

    async def count(self, project: str) -> int:
        context = self.context
        with unavailable:
            return await context.calls.command("ZCARD", context.key_names.catalogue(project))

    async def stats(self, project: str, name: str) -> QueueStats:
        context = self.context
        key = context.key_names.queue(project, name)
        with unavailable:
            while True:
                reply = await context.scripts.stats.call(
                    [key], [context.now_arg(), READ_REAP_BUDGET])
                if not reply[0]:
                    continue
                nonce, as_of, outbox, free, claimed, delayed = reply[1:7]
                if outbox:
                    await context.moves.complete(project, name)
                    continue
                break
        edges = layout.messages(nonce, reply[7:], as_of)
        return QueueStats(free=free, claimed=claimed, delayed=delayed,
                          oldest=edges[0] if edges else None,
                          newest=edges[-1] if edges else None)
