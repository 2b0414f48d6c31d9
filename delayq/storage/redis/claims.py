"""The claims of the Redis driver: a claim is one script call, which reads the head of
the queue's free set and moves what it takes to the claimed set (``Driver``'s
docstring); a dead-letter move to another cluster slot completes through the outbox
(``moves.py``)."""

from __future__ import annotations

from typing import Any

from delayq import errors
from delayq.claim import Claim, refuse_delete
from delayq.message import Message
from delayq.queue import DeadLetterPolicy
from delayq.retry import Backoff
from delayq.storage import base
from delayq.storage.redis import layout
from delayq.storage.redis.client import unavailable
from delayq.storage.redis.context import Context
from delayq.storage.redis.layout import US, new_nonce, new_tokens
from delayq.storage.redis.scripts import (
    CLAIM_BUDGET,
    METADATA_CHANGED,
    WRITE_REAP_BUDGET,
    backoff_args,
)


class Claims(base.Claims):
    """Claims in Redis."""

    def __init__(self, context: Context) -> None:
        self.context = context

    async def create(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
                     dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
                     backoff: Backoff | None = None) -> Claim | None:
        context = self.context
        key = context.key_names.queue(project, queue)
        script_keys = [key]
        policy: list[Any] = ["", "", ""]
        target_nonce = ""  # only a dead-letter queue in this slot can be created here
        waits = backoff_args(backoff)
        with unavailable:
            if dead_letter is not None:
                target = context.key_names.queue(project, dead_letter.queue)
                if await context.same_slot(key, target):
                    script_keys.append(target)
                    target_nonce = new_nonce()
                ttl_arg = "" if dead_letter.messages_ttl is None else dead_letter.messages_ttl
                policy = [dead_letter.max_claim_count, dead_letter.queue, ttl_arg]
            while True:
                reply = await context.scripts.claim.call(script_keys, [
                    context.now_arg(), ttl, grace, limit, *policy, target_nonce,
                    CLAIM_BUDGET, queue, WRITE_REAP_BUDGET, metadata_token or "", *waits,
                    new_tokens(1)])
                if reply[0] == METADATA_CHANGED:
                    raise context.metadata_changed(key)
                nonce, as_of, claim_id, more, unlisted, outbox = reply[:6]
                if unlisted and dead_letter is not None:
                    await context.catalogue.list_queue(project, dead_letter.queue)
                if outbox:
                    await context.moves.complete(project, queue)
                if claim_id or not more:
                    break
        if not claim_id:
            return None
        return Claim(id=claim_id.decode(), ttl=ttl, grace=grace,
                     created=as_of / US, expires=(as_of + ttl * US) / US, as_of=as_of / US,
                     messages=layout.messages(nonce, reply[6:], as_of))

    async def get(self, project: str, queue: str, claim_id: str) -> Claim:
        context = self.context
        with unavailable:
            reply = await context.scripts.claim_get.call(
                [context.key_names.queue(project, queue)], [context.now_arg(), claim_id])
        if len(reply) == 2:
            raise errors.ClaimNotFound.with_id(claim_id)
        nonce, as_of, ttl, grace, created, expires = reply[:6]
        return Claim(id=claim_id, ttl=ttl, grace=grace, created=created / US,
                     expires=expires / US, as_of=as_of / US,
                     messages=layout.messages(nonce, reply[6:], as_of))

    async def renew(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> None:
        context = self.context
        with unavailable:
            missing = await context.scripts.renew.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), claim_id, ttl, grace, *backoff_args(backoff)])
        if missing:
            raise errors.ClaimNotFound.with_id(claim_id)

    async def release(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> None:
        context = self.context
        with unavailable:
            await context.scripts.release.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), claim_id, *backoff_args(backoff)])

    async def release_message(self, project: str, queue: str, message_id: str,
                              claim_id: str, delay: float) -> Message:
        context = self.context
        with unavailable:
            reply = await context.scripts.release_message.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), message_id, claim_id, repr(delay)])
        if len(reply) == 1:
            if reply[0] < 0:
                raise errors.MessageNotFound.with_id(message_id)
            refuse_delete(reply[0], message_id, claim_id)
        nonce, as_of, seq, raw = reply[1:]
        return layout.message(nonce, seq, raw, as_of)

    async def available_in(self, project: str, queue: str) -> float | None:
        context = self.context
        with unavailable:
            reply = await context.scripts.available_in.call(
                [context.key_names.queue(project, queue)], [context.now_arg()])
        return reply[0] / US if reply else None
