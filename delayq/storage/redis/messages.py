"""The messages of the Redis driver: records in hashes of 64, each in one of the
queue's sorted sets (``Driver``'s docstring), moved by one script per transition."""

from __future__ import annotations

from typing import Any

from delayq import errors, idempotency, jsontext
from delayq.claim import refuse_delete
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, ListingMarker, Message, NewMessage, Unchanged
from delayq.storage import base
from delayq.storage.redis import layout
from delayq.storage.redis.catalogue import Creation
from delayq.storage.redis.client import unavailable
from delayq.storage.redis.context import Context
from delayq.storage.redis.layout import TOKEN_LENGTH, client_bytes, new_nonce, new_tokens
from delayq.storage.redis.scripts import (
    CLAIM_BUDGET,
    KEY_TAKEN,
    LIST_BUDGET,
    METADATA_CHANGED,
    QUEUE_MISSING,
    QUOTA_EXCEEDED,
    READ_REAP_BUDGET,
    REDRIVE_SKIP_BUDGET,
    WRITE_REAP_BUDGET,
)

NO_KEY = ["", "", 0]  # the idempotency arguments of a post without a key


class Messages(base.Messages):
    """Messages in Redis."""

    def __init__(self, context: Context) -> None:
        self.context = context

    async def post(self, project: str, queue: str, client_id: str,
                   messages: list[NewMessage], *, metadata_token: Any = None,
                   message_quota: int = 0, queue_quota: int = 0,
                   key: PostKey | None = None) -> list[str]:
        """The message quota is checked in the post script, exactly: a queue's sorted
        sets hold each of its messages once, and the script reaps the expired ones
        before it refuses (``_quota_refusal``). So is the idempotency key: looked up,
        and kept with the messages, by the same script call. A post that would make its
        queue under the queue quota holds the name first (catalogue.py): the script,
        told the hold's fence, makes the queue only while the hold lasts."""
        context = self.context
        client = client_bytes(client_id)
        state = context.key_names.queue(project, queue)
        creation = Creation(context.catalogue, project, queue, queue_quota)
        args: list[Any] = [context.now_arg(), new_nonce(), WRITE_REAP_BUDGET,
                           metadata_token or "", message_quota, creation.fence]
        args += NO_KEY if key is None else [key.key, key.digest, key.window]
        tokens = new_tokens(len(messages))
        args.append(tokens)
        for m in messages:
            # No spaces; ASCII escapes keep lone surrogates (valid JSON, not UTF-8).
            body = jsontext.dumps_compact(m.body)
            args += [body, client, m.ttl, m.delay]
        post = context.scripts.post
        with unavailable:
            reply = await post.call([state], args)
            try:
                while True:
                    if reply[0] == KEY_TAKEN:
                        digest, _, ids = reply[1].decode().partition(",")
                        raise KeyTaken(StoredKey(digest, idempotency.decode_ids(ids)))
                    if reply[0] == METADATA_CHANGED:
                        raise context.metadata_changed(state)
                    if reply[0] == QUEUE_MISSING:
                        args[5] = await creation.missing()
                    elif message_quota and reply[0] == QUOTA_EXCEEDED:
                        self._quota_refusal(queue, reply, len(messages), message_quota)
                        # Expired messages not reaped yet were counted: reap more.
                        args[2] = READ_REAP_BUDGET
                    else:
                        break
                    reply = await post.call([state], args)
            except (KeyTaken, errors.MetadataChanged, errors.QuotaExceeded):
                await creation.done(False)  # refused: the post made no queue
                raise
            await creation.done(True)
            if not reply[1]:  # the queue is not in its project's catalogue yet
                await context.catalogue.list_queue(project, queue)
        nonce = reply[0]
        return [(nonce + seq + tokens[n * TOKEN_LENGTH:(n + 1) * TOKEN_LENGTH]).decode()
                for n, seq in enumerate(reply[2:])]

    @staticmethod
    def _quota_refusal(queue: str, reply: list, posted: int, quota: int) -> None:
        """Raise QuotaExceeded for the post script's refusal *reply* when it counted no
        expired message; return when it may have (the post is then tried again)."""
        _, held, finished = reply
        if finished:
            raise errors.QuotaExceeded.messages(queue, held, posted, quota)

    async def page(self, project: str, queue: str, *, marker: ListingMarker, limit: int,
                   exclude_client: str | None, include_claimed: bool,
                   include_delayed: bool) -> tuple[list[Message], str | None]:
        if marker.position >= layout.SEQ_LIMIT:
            return [], None  # past any message's sequence name
        after = layout.seq_name(marker.position) if marker.position else ""
        after_id = marker.message_id or ""  # list.lua finds the message's seq
        if layout.is_sequence_name(after_id):
            # The marker of a next link from before markers were decimal (a rolling
            # upgrade hands both out): still a sequence name to list after.
            after, after_id = after_id, ""
        context = self.context
        exclude = client_bytes(exclude_client) if exclude_client else b""
        key = context.key_names.queue(project, queue)
        page: list[Message] = []
        next_marker = None
        with unavailable:
            while len(page) < limit:
                reply = await context.scripts.list.call([key], [
                    context.now_arg(), after, limit - len(page), int(include_claimed),
                    int(include_delayed), exclude, LIST_BUDGET, after_id])
                nonce, as_of, outbox, status, last = reply[:5]
                if outbox:
                    await context.moves.complete(project, queue)
                if len(reply) > 5:
                    page += layout.messages(nonce, reply[5:], as_of)
                    # The marker is a position in this queue, not an id: a moved message
                    # keeps the id its first queue minted. Decimal, as every driver's
                    # (validation.listing_marker), from the sequence name's base 36.
                    next_marker = str(int(reply[-2], 36))
                if status != 2:
                    break
                after, after_id = last.decode(), ""
        return page, next_marker

    def is_message_id(self, text: str) -> bool:
        # A sequence name, too: see page.
        return layout.is_message_id(text) or layout.is_sequence_name(text)

    async def get(self, project: str, queue: str, ids: list[str]) -> list[Message]:
        context = self.context
        key = context.key_names.queue(project, queue)
        with unavailable:
            reply = await context.scripts.get.call([key], [context.now_arg(), *ids])
            if reply[2]:
                await context.moves.complete(project, queue)
                reply = await context.scripts.get.call([key], [context.now_arg(), *ids])
        return layout.messages(reply[0], reply[3:], reply[1])

    async def delete(self, project: str, queue: str, message_id: str,
                     claim_id: str | None) -> None:
        context = self.context
        with unavailable:
            code = await context.scripts.delete.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), message_id, claim_id or ""])
        refuse_delete(code, message_id, claim_id)

    async def delete_many(self, project: str, queue: str, ids: list[str]) -> None:
        context = self.context
        with unavailable:
            await context.scripts.delete_many.call([context.key_names.queue(project, queue)],
                                                   [context.now_arg(), *ids])

    async def pop(self, project: str, queue: str, limit: int) -> list[Message]:
        context = self.context
        key = context.key_names.queue(project, queue)
        with unavailable:
            while True:
                reply = await context.scripts.pop.call(
                    [key], [context.now_arg(), limit, CLAIM_BUDGET])
                nonce, as_of, more = reply[:3]
                if len(reply) > 3 or not more:
                    return layout.messages(nonce, reply[3:], as_of)

    async def edit(self, project: str, queue: str, message_id: str, *,
                   body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                   ) -> Message:
        context = self.context
        # ASCII escapes, as in a post; '' (never valid JSON) means "unchanged".
        text = "" if body is NO_CHANGE else jsontext.dumps_compact(body)
        with unavailable:
            reply = await context.scripts.edit.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), message_id, text, "" if delay is None else repr(delay)])
        if reply[0] == 1:
            raise errors.MessageNotFound.with_id(message_id)
        if reply[0] == 2:
            raise errors.MessageHeld.editing(message_id)
        nonce, as_of, seq, raw = reply[1:]
        return layout.message(nonce, seq, raw, as_of)

    async def redrive(self, project: str, queue: str, *, destination: str | None,
                      limit: int, queue_quota: int = 0) -> int:
        context = self.context
        with unavailable:
            if destination and queue_quota:
                await self._make_destination(project, queue, destination, queue_quota)
            moved, outbox = await context.scripts.redrive.call(
                [context.key_names.queue(project, queue)],
                [context.now_arg(), limit, destination or "", queue, REDRIVE_SKIP_BUDGET,
                 WRITE_REAP_BUDGET])
            if outbox:
                await context.moves.complete(project, queue)
        return moved

    async def _make_destination(self, project: str, queue: str, destination: str,
                                quota: int) -> None:
        """Make a redrive's missing *destination* under the queue *quota* before any
        message moves, since a message that has left its queue is moved whatever comes;
        made (empty) even if none then moves, unless the source *queue* is missing."""
        context = self.context
        if await context.calls.command("HEXISTS", context.key_names.queue(project, destination),
                                       "meta"):
            return
        if await context.calls.command("HEXISTS", context.key_names.queue(project, queue),
                                       "meta"):
            await context.catalogue.create_queue(project, destination, "{}", quota)
