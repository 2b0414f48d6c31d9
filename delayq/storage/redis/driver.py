"""The Redis driver.

Every transition is one Lua script (``lua/``), so it is atomic across every API process;
time comes from the Redis server's ``TIME``, so API hosts with skewed clocks agree on when
a message is due.

Each queue's keys share one hash tag, hence one cluster slot. A message is in exactly one
of three sorted sets — free (by availability), delayed (by due time), claimed (by claim
expiry) — so a claim reads the head of each and costs O(log n + limit) however many
messages are delayed or claimed. A claim under a retry policy that makes a message due
after the claim ends files it among the delayed by that due time, its claim's expiry in
a fourth set beside (so stats still count it as claimed while the claim lives); a claim
never reads that set. Records live in hashes of 64 consecutive messages, which
Redis stores as compact listpacks; ``docs/redis.md`` has the sizing figures.

A dead-letter move to a queue in the same slot (always, on a single server) happens inside
the claim script. A move to another cluster slot goes through the source queue's outbox:
the claim script moves the message there; ``_complete_moves`` copies it into the
dead-letter queue (``move_in``, which remembers the move's token, so doing it twice
applies it once) and then deletes it from the outbox. A process dying between the steps
leaves the outbox entry, which the next operation on the source queue (or the reaper)
completes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import redis
from oslo_config import cfg
from redis.cluster import RedisCluster
from redis.crc import key_slot

from delayq import errors, events, idempotency, jsontext
from delayq.claim import Claim, refuse_delete
from delayq.conf import events_settings
from delayq.idempotency import KeyTaken, PostKey, StoredKey
from delayq.message import NO_CHANGE, Message, NewMessage, Unchanged
from delayq.operations import Steps, operation
from delayq.queue import DeadLetterPolicy, QueueStats
from delayq.retry import Backoff
from delayq.storage import base
from delayq.storage.redis import layout, persistence, trail
from delayq.storage.redis.client import (
    NAME,
    Clients,
    connect,
    connect_async,
    fast_path,
    parse_uri,
    unavailable,
)
from delayq.storage.redis.layout import (
    TOKEN_LENGTH,
    US,
    Keys,
    client_bytes,
    new_nonce,
    new_tokens,
)
from delayq.storage.redis.options import GROUP
from delayq.storage.redis.quotas import Catalogue, Creation
from delayq.storage.redis.scripts import (
    KEY_TAKEN,
    METADATA_CHANGED,
    QUEUE_MISSING,
    QUOTA_EXCEEDED,
    Scripts,
    backoff_args,
)
from delayq.storage.redis.subscriptions import Subscriptions
from delayq.subscription import Subscription, SubscriptionChange

LOG = logging.getLogger(__name__)

# Work bounds per script call: Redis runs one script at a time, so no call may run long.
CLAIM_BUDGET = 256  # expired or dead-lettered candidates a claim or pop skips per call
LIST_BUDGET = 1000  # records a listing reads per call
WRITE_REAP_BUDGET = 2  # expiry buckets each write reaps on the side
REDRIVE_SKIP_BUDGET = 10_000  # messages without a source a redrive steps over per call
READ_REAP_BUDGET = 64  # expiry buckets a stats call reaps per call before counting
CONNECT_PAUSE = 0.5  # seconds between attempts to connect while Redis is down
METADATA_CACHE_SIZE = 10_000  # queues whose metadata a process keeps for writes
NO_KEY = ["", "", 0]  # the idempotency arguments of a post without a key


class Driver(base.Driver):
    """Queues, messages and claims in Redis (one server or a cluster)."""

    name = NAME
    calls_are_brief = True
    # Every store call an operation yields is awaited on the event loop, by the running
    # loop's asyncio client (calls.py).
    waits_on_loop = True

    def __init__(self, uri: str, *, namespace: str = "dq", socket_timeout: float = 5.0,
                 connect_timeout: float = 2.0, max_connections: int = 64,
                 reap_interval: int = 0, move_marker_ttl: int = 3600,
                 clock: Callable[[], float] | None = None,
                 events_settings: events.Settings = events.ON,
                 endings: base.Endings = base.ignore_endings) -> None:
        super().__init__(endings=endings)
        # A malformed URI stops the server at start, not at each request.
        parse_uri(uri)
        self._uri = uri
        self._connect_options = dict(socket_timeout=socket_timeout,
                                     connect_timeout=connect_timeout,
                                     max_connections=max_connections)
        self.keys = Keys(namespace)
        self._marker_ttl = move_marker_ttl
        self._events = events_settings
        self._clock = clock
        # ARGV[1] of every script: without a clock "" (what str() returns, with no Python
        # call), so the script reads the server's clock.
        self._now_arg: Callable[[], str] = str if clock is None else self._clock_arg
        self._subscriptions = Subscriptions(self.keys, lambda: self._scripts, self._now_arg)
        self._catalogue = Catalogue(self.keys, lambda: self._scripts, self._now_arg)
        # Queue key → the metadata last read for a write, decoded and raw; posts and
        # claims check the raw text in their script (queue_for_write), so a stale entry
        # costs a retry, never a rule.
        self._metadata: dict[str, tuple[dict[str, Any], bytes]] = {}
        self._link: tuple[redis.Redis | RedisCluster, bool, Scripts] | None = None
        self._link_lock = threading.Lock()
        self._link_failed_at = 0.0
        self._link_error = ""
        try:
            self._connected()
        except errors.StorageUnavailable as exc:
            LOG.warning("%s; connecting again at the next request.", exc.description)
        self.start_reaper(reap_interval, self._reaper_lease)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, *,
                  endings: base.Endings = base.ignore_endings) -> Driver:
        group = conf[GROUP]
        return cls(group.uri, namespace=group.namespace, socket_timeout=group.socket_timeout,
                   connect_timeout=group.connect_timeout,
                   max_connections=group.max_connections, reap_interval=group.reap_interval,
                   move_marker_ttl=group.move_marker_ttl,
                   events_settings=events_settings(conf), endings=endings)

    # The connection: made at start, or at the first request after Redis came up.

    def _connected(self) -> tuple[redis.Redis | RedisCluster, bool, Scripts]:
        """The client, connecting first if needed.

        While Redis is down, one request at a time tries to connect, at most once per
        CONNECT_PAUSE seconds; every other request fails at once with the last error
        instead of queueing behind the attempt.
        """
        link = self._link
        if link is not None:
            return link
        if not self._link_lock.acquire(blocking=False):
            raise unavailable.error("Connecting to Redis; retry.")
        try:
            if self._link is None:
                if time.monotonic() - self._link_failed_at < CONNECT_PAUSE:
                    raise unavailable.error(self._link_error)
                try:
                    with unavailable:
                        client, clustered = connect(self._uri, **self._connect_options)
                        clients = Clients(
                            client, clustered, functools.partial(
                                connect_async, self._uri, clustered,
                                **self._connect_options),
                            self._connect_options["max_connections"],
                            None if clustered else fast_path(self._uri,
                                                             **self._connect_options))
                        scripts = Scripts(clients, self._events.retention, self.endings)
                        scripts.load(client)
                        persistence.check(client)
                except errors.StorageUnavailable as exc:
                    self._link_failed_at = time.monotonic()
                    self._link_error = exc.detail
                    raise
                self._link = (client, clustered, scripts)
            return self._link
        finally:
            self._link_lock.release()

    @property
    def _client(self) -> redis.Redis | RedisCluster:
        link = self._link  # connected: no call to _connected()
        return (link if link is not None else self._connected())[0]

    @property
    def cluster(self) -> bool:
        """True when Redis is a cluster (queues then live in different slots)."""
        return self._connected()[1]

    @property
    def _scripts(self) -> Scripts:
        link = self._link  # connected: no call to _connected()
        return (link if link is not None else self._connected())[2]

    # Arguments

    def _clock_arg(self) -> str:
        """ARGV[1] of every script with a clock given (tests): its time in microseconds."""
        return str(round(self._clock() * US))

    def same_slot(self, key: str, other: str) -> bool:
        return not self.cluster or key_slot(key.encode()) == key_slot(other.encode())

    # Connection

    @operation
    def now(self) -> Steps[float]:
        if self._clock is not None:
            return self._clock()
        with unavailable:
            reply = yield self._scripts.commands.call("TIME")
        if isinstance(reply, dict):  # a cluster answers per node
            reply = next(iter(reply.values()))
        seconds, micros = reply
        return seconds + micros / US

    @operation
    def ping(self) -> Steps[bool]:
        try:
            return bool((yield self._scripts.commands.call("PING")))
        except (redis.exceptions.RedisError, errors.StorageUnavailable):
            return False

    def close(self) -> None:
        self.stop_reaper()
        if self._link is not None:
            self._link[2].clients.close()
            self._link = None

    # The project catalogue (one slot per project) lists its queues for GET /v2/queues
    # and counts them for the queue quota (quotas.py).

    def _list_queue(self, project: str, name: str) -> Steps[None]:
        """Add an existing queue to its project's catalogue, then mark it listed."""
        yield from self._catalogue.list(project, name)
        yield self._scripts.queue_update.call([self.keys.queue(project, name)],
                                              ["listed", "1"])

    def _create(self, project: str, name: str, metadata: str, quota: int) -> Steps[bool]:
        """Make the queue unless it exists, under the queue *quota* (0: none); True
        when this call made it."""
        key = self.keys.queue(project, name)
        creation = Creation(self._catalogue, project, name, quota)
        while True:
            created, listed, exists = yield self._scripts.queue_create.call(
                [key], [metadata, new_nonce(), self._now_arg(), creation.fence])
            if exists:
                break
            yield from creation.missing()
        yield from creation.done(True)
        if not (quota and listed):
            # Always without a quota: this also repairs a queue a crashed delete left out
            # of the listing.
            yield from self._list_queue(project, name)
        return bool(created)

    # Queues

    @operation
    def create_queue(self, project: str, name: str, metadata: dict[str, Any], *,
                     queue_quota: int = 0) -> Steps[bool]:
        with unavailable:
            return (yield from self._create(project, name, json.dumps(metadata),
                                            queue_quota))

    @operation
    def get_queue(self, project: str, name: str) -> Steps[dict[str, Any] | None]:
        with unavailable:
            raw = yield self._scripts.commands.call("HGET", self.keys.queue(project, name),
                                                    "meta")
        return json.loads(raw) if raw is not None else None

    @operation
    def queue_for_write(self, project: str, name: str
                        ) -> Steps[tuple[dict[str, Any] | None, Any]]:
        """From this process's cache when it has the queue: the post or claim script
        compares the token (the metadata as read) with the stored metadata, so a post
        or claim costs one round trip instead of two."""
        key = self.keys.queue(project, name)
        cached = self._metadata.get(key)
        if cached is None:
            with unavailable:
                raw = yield self._scripts.commands.call("HGET", key, "meta")
            if raw is None:
                return None, None
            if len(self._metadata) >= METADATA_CACHE_SIZE:
                self._metadata.clear()  # crude, but a miss costs only the read above
            cached = self._metadata[key] = (json.loads(raw), raw)
        return cached

    def _metadata_changed(self, key: str) -> errors.MetadataChanged:
        self._metadata.pop(key, None)
        return errors.MetadataChanged("The queue's metadata changed during the request.",
                                      store=NAME)

    @operation
    def set_queue_metadata(self, project: str, name: str, metadata: dict[str, Any]
                           ) -> Steps[None]:
        self._metadata.pop(self.keys.queue(project, name), None)
        with unavailable:
            done = yield self._scripts.queue_update.call([self.keys.queue(project, name)],
                                                         ["meta", json.dumps(metadata)])
        if not done:
            raise errors.QueueNotFound.named(name)

    @operation
    def delete_queue(self, project: str, name: str) -> Steps[None]:
        self._metadata.pop(self.keys.queue(project, name), None)
        with unavailable:
            # Unlist first: a post racing the delete then either lands before the drop
            # (and goes with it) or re-creates and re-lists the queue.
            yield from self._catalogue.unlist(project, name)
            yield from self._drop(project, name, "delete")

    @operation
    def purge_queue(self, project: str, name: str) -> Steps[None]:
        with unavailable:
            yield from self._drop(project, name, "purge")

    def _drop(self, project: str, name: str, how: str) -> Steps[None]:
        """Empty (or delete) a queue; dead-letter moves it started still complete."""
        yield from self._complete_moves(project, name)
        if (yield self._scripts.queue_drop.call([self.keys.queue(project, name)],
                                                [how, self._now_arg()])):
            yield from self._complete_moves(project, name)  # a concurrent claim's moves

    @operation
    def list_queues(self, project: str, marker: str | None, limit: int
                    ) -> Steps[list[tuple[str, dict[str, Any]]]]:
        found: list[tuple[str, dict[str, Any]]] = []
        start = f"({marker}" if marker else "-"
        commands = self._scripts.commands
        with unavailable:
            while len(found) < limit:
                names = yield commands.call("ZRANGEBYLEX", self.keys.catalogue(project),
                                            start, "+", "LIMIT", 0, limit - len(found))
                if not names:
                    break
                metadata = yield commands.batch(*(
                    ("HGET", self.keys.queue(project, name.decode()), "meta")
                    for name in names))
                for name, raw in zip(names, metadata, strict=True):
                    # A queue whose delete crashed half-way is listed but gone: skip it.
                    if raw is not None:
                        found.append((name.decode(), json.loads(raw)))
                start = f"({names[-1].decode()}"
        return found

    @operation
    def count_queues(self, project: str) -> Steps[int]:
        with unavailable:
            return (yield self._scripts.commands.call("ZCARD",
                                                      self.keys.catalogue(project)))

    @operation
    def queue_stats(self, project: str, name: str) -> Steps[QueueStats]:
        key = self.keys.queue(project, name)
        with unavailable:
            while True:
                reply = yield self._scripts.stats.call([key],
                                                       [self._now_arg(), READ_REAP_BUDGET])
                if not reply[0]:
                    continue
                nonce, as_of, outbox, free, claimed, delayed = reply[1:7]
                if outbox:
                    yield from self._complete_moves(project, name)
                    continue
                break
        edges = layout.messages(nonce, reply[7:], as_of)
        return QueueStats(free=free, claimed=claimed, delayed=delayed,
                          oldest=edges[0] if edges else None,
                          newest=edges[-1] if edges else None)

    # Messages

    @operation
    def post_messages(self, project: str, queue: str, client_id: str,
                      messages: list[NewMessage], *, metadata_token: Any = None,
                      message_quota: int = 0, queue_quota: int = 0,
                      key: PostKey | None = None) -> Steps[list[str]]:
        """The message quota is checked in the post script, exactly: a queue's sorted
        sets hold each of its messages once, and the script reaps the expired ones
        before it refuses (``_quota_refusal``). So is the idempotency key: looked up,
        and kept with the messages, by the same script call. A post that would make its
        queue under the queue quota holds the name first (quotas.py): the script, told
        the hold's fence, makes the queue only while the hold lasts."""
        client = client_bytes(client_id)
        state = self.keys.queue(project, queue)
        creation = Creation(self._catalogue, project, queue, queue_quota)
        args: list[Any] = [self._now_arg(), new_nonce(), WRITE_REAP_BUDGET,
                           metadata_token or "", message_quota, creation.fence]
        args += NO_KEY if key is None else [key.key, key.digest, key.window]
        tokens = new_tokens(len(messages))
        args.append(tokens)
        for m in messages:
            # No spaces; ASCII escapes keep lone surrogates (valid JSON, not UTF-8).
            body = jsontext.dumps_compact(m.body)
            args += [body, client, m.ttl, m.delay]
        with unavailable:
            reply = yield self._scripts.post.call([state], args)
            try:
                while True:
                    if reply[0] == KEY_TAKEN:
                        digest, _, ids = reply[1].decode().partition(",")
                        raise KeyTaken(StoredKey(digest, idempotency.decode_ids(ids)))
                    if reply[0] == METADATA_CHANGED:
                        raise self._metadata_changed(state)
                    if reply[0] == QUEUE_MISSING:
                        args[5] = yield from creation.missing()
                    elif message_quota and reply[0] == QUOTA_EXCEEDED:
                        self._quota_refusal(queue, reply, len(messages), message_quota)
                        # Expired messages not reaped yet were counted: reap more.
                        args[2] = READ_REAP_BUDGET
                    else:
                        break
                    reply = yield self._scripts.post.call([state], args)
            except (KeyTaken, errors.MetadataChanged, errors.QuotaExceeded):
                yield from creation.done(False)  # refused: the post made no queue
                raise
            yield from creation.done(True)
            if not reply[1]:  # the queue is not in its project's catalogue yet
                yield from self._list_queue(project, queue)
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

    @operation
    def list_messages(self, project: str, queue: str, *, marker: str | None, limit: int,
                      exclude_client: str | None, include_claimed: bool,
                      include_delayed: bool) -> Steps[tuple[list[Message], str | None]]:
        after = marker or ""
        if after and not layout.is_sequence_name(after):
            raise errors.ValidationError(f"marker {marker[:40]!r} is not valid.")
        exclude = client_bytes(exclude_client) if exclude_client else b""
        key = self.keys.queue(project, queue)
        page: list[Message] = []
        next_marker = None
        with unavailable:
            while len(page) < limit:
                reply = yield self._scripts.list.call([key], [
                    self._now_arg(), after, limit - len(page), int(include_claimed),
                    int(include_delayed), exclude, LIST_BUDGET])
                nonce, as_of, outbox, status, last = reply[:5]
                if outbox:
                    yield from self._complete_moves(project, queue)
                if len(reply) > 5:
                    page += layout.messages(nonce, reply[5:], as_of)
                    # The marker is a position in this queue, not an id: a moved message
                    # keeps the id its first queue minted.
                    next_marker = reply[-2].decode()
                if status != 2:
                    break
                after = last.decode()
        return page, next_marker

    @operation
    def get_messages(self, project: str, queue: str, ids: list[str]) -> Steps[list[Message]]:
        key = self.keys.queue(project, queue)
        with unavailable:
            reply = yield self._scripts.get.call([key], [self._now_arg(), *ids])
            if reply[2]:
                yield from self._complete_moves(project, queue)
                reply = yield self._scripts.get.call([key], [self._now_arg(), *ids])
        return layout.messages(reply[0], reply[3:], reply[1])

    @operation
    def delete_message(self, project: str, queue: str, message_id: str,
                       claim_id: str | None) -> Steps[None]:
        with unavailable:
            code = yield self._scripts.delete.call([self.keys.queue(project, queue)],
                                                   [self._now_arg(), message_id,
                                                    claim_id or ""])
        refuse_delete(code, message_id, claim_id)

    @operation
    def delete_messages(self, project: str, queue: str, ids: list[str]) -> Steps[None]:
        with unavailable:
            yield self._scripts.delete_many.call([self.keys.queue(project, queue)],
                                                 [self._now_arg(), *ids])

    @operation
    def pop_messages(self, project: str, queue: str, limit: int) -> Steps[list[Message]]:
        key = self.keys.queue(project, queue)
        with unavailable:
            while True:
                reply = yield self._scripts.pop.call([key],
                                                     [self._now_arg(), limit, CLAIM_BUDGET])
                nonce, as_of, more = reply[:3]
                if len(reply) > 3 or not more:
                    return layout.messages(nonce, reply[3:], as_of)

    @operation
    def edit_message(self, project: str, queue: str, message_id: str, *,
                     body: Any | Unchanged = NO_CHANGE, delay: float | None = None
                     ) -> Steps[Message]:
        # ASCII escapes, as in a post; '' (never valid JSON) means "unchanged".
        text = "" if body is NO_CHANGE else jsontext.dumps_compact(body)
        with unavailable:
            reply = yield self._scripts.edit.call(
                [self.keys.queue(project, queue)],
                [self._now_arg(), message_id, text, "" if delay is None else repr(delay)])
        if reply[0] == 1:
            raise errors.MessageNotFound.with_id(message_id)
        if reply[0] == 2:
            raise errors.MessageHeld.editing(message_id)
        nonce, as_of, seq, raw = reply[1:]
        return layout.message(nonce, seq, raw, as_of)

    @operation
    def redrive(self, project: str, queue: str, *, destination: str | None,
                limit: int, queue_quota: int = 0) -> Steps[int]:
        with unavailable:
            if destination and queue_quota:
                yield from self._make_destination(project, queue, destination,
                                                  queue_quota)
            moved, outbox = yield self._scripts.redrive.call(
                [self.keys.queue(project, queue)],
                [self._now_arg(), limit, destination or "", queue, REDRIVE_SKIP_BUDGET,
                 WRITE_REAP_BUDGET])
            if outbox:
                yield from self._complete_moves(project, queue)
        return moved

    def _make_destination(self, project: str, queue: str, destination: str,
                          quota: int) -> Steps[None]:
        """Make a redrive's missing *destination* under the queue *quota* before any
        message moves, since a message that has left its queue is moved whatever comes;
        made (empty) even if none then moves, unless the source *queue* is missing."""
        commands = self._scripts.commands
        if (yield commands.call("HEXISTS", self.keys.queue(project, destination), "meta")):
            return
        if (yield commands.call("HEXISTS", self.keys.queue(project, queue), "meta")):
            yield from self._create(project, destination, "{}", quota)

    # Claims

    @operation
    def claim(self, project: str, queue: str, *, ttl: int, grace: int, limit: int,
              dead_letter: DeadLetterPolicy | None, metadata_token: Any = None,
              backoff: Backoff | None = None) -> Steps[Claim | None]:
        key = self.keys.queue(project, queue)
        keys = [key]
        policy = ["", "", ""]
        target_nonce = ""  # only a dead-letter queue in this slot can be created here
        waits = backoff_args(backoff)
        with unavailable:
            if dead_letter is not None:
                target = self.keys.queue(project, dead_letter.queue)
                if self.same_slot(key, target):
                    keys.append(target)
                    target_nonce = new_nonce()
                ttl_arg = "" if dead_letter.messages_ttl is None else dead_letter.messages_ttl
                policy = [dead_letter.max_claim_count, dead_letter.queue, ttl_arg]
            while True:
                reply = yield self._scripts.claim.call(keys, [
                    self._now_arg(), ttl, grace, limit, *policy, target_nonce, CLAIM_BUDGET,
                    queue, WRITE_REAP_BUDGET, metadata_token or "", *waits, new_tokens(1)])
                if reply[0] == METADATA_CHANGED:
                    raise self._metadata_changed(key)
                nonce, as_of, claim_id, more, unlisted, outbox = reply[:6]
                if unlisted:
                    yield from self._list_queue(project, dead_letter.queue)
                if outbox:
                    yield from self._complete_moves(project, queue)
                if claim_id or not more:
                    break
        if not claim_id:
            return None
        return Claim(id=claim_id.decode(), ttl=ttl, grace=grace,
                     created=as_of / US, expires=(as_of + ttl * US) / US, as_of=as_of / US,
                     messages=layout.messages(nonce, reply[6:], as_of))

    @operation
    def get_claim(self, project: str, queue: str, claim_id: str) -> Steps[Claim]:
        with unavailable:
            reply = yield self._scripts.claim_get.call([self.keys.queue(project, queue)],
                                                       [self._now_arg(), claim_id])
        if len(reply) == 2:
            raise errors.ClaimNotFound.with_id(claim_id)
        nonce, as_of, ttl, grace, created, expires = reply[:6]
        return Claim(id=claim_id, ttl=ttl, grace=grace, created=created / US,
                     expires=expires / US, as_of=as_of / US,
                     messages=layout.messages(nonce, reply[6:], as_of))

    @operation
    def renew_claim(self, project: str, queue: str, claim_id: str, ttl: int,
                    grace: int, backoff: Backoff | None = None) -> Steps[None]:
        with unavailable:
            missing = yield self._scripts.renew.call(
                [self.keys.queue(project, queue)],
                [self._now_arg(), claim_id, ttl, grace, *backoff_args(backoff)])
        if missing:
            raise errors.ClaimNotFound.with_id(claim_id)

    @operation
    def release_claim(self, project: str, queue: str, claim_id: str,
                      backoff: Backoff | None = None) -> Steps[None]:
        with unavailable:
            yield self._scripts.release.call([self.keys.queue(project, queue)],
                                             [self._now_arg(), claim_id,
                                              *backoff_args(backoff)])

    @operation
    def release_message(self, project: str, queue: str, message_id: str, claim_id: str,
                        delay: float) -> Steps[Message]:
        with unavailable:
            reply = yield self._scripts.release_message.call(
                [self.keys.queue(project, queue)],
                [self._now_arg(), message_id, claim_id, repr(delay)])
        if len(reply) == 1:
            if reply[0] < 0:
                raise errors.MessageNotFound.with_id(message_id)
            refuse_delete(reply[0], message_id, claim_id)
        nonce, as_of, seq, raw = reply[1:]
        return layout.message(nonce, seq, raw, as_of)

    # Subscriptions (subscriptions.py)

    @operation
    def create_subscription(self, project: str, queue: str, subscriber: str, ttl: int,
                            options: dict[str, Any]) -> Steps[str | None]:
        return (yield from self._subscriptions.create(project, queue, subscriber, ttl,
                                                      options))

    @operation
    def get_subscription(self, project: str, queue: str, subscription_id: str
                         ) -> Steps[Subscription | None]:
        return (yield from self._subscriptions.get(project, queue, subscription_id))

    @operation
    def list_subscriptions(self, project: str, queue: str, marker: str | None,
                           limit: int) -> Steps[list[Subscription]]:
        return (yield from self._subscriptions.list(project, queue, marker, limit))

    @operation
    def update_subscription(self, project: str, queue: str, subscription_id: str,
                            change: SubscriptionChange) -> Steps[None]:
        yield from self._subscriptions.update(project, queue, subscription_id, change)

    @operation
    def delete_subscription(self, project: str, queue: str, subscription_id: str
                            ) -> Steps[None]:
        yield from self._subscriptions.delete(project, queue, subscription_id)

    @operation
    def purge_subscriptions(self, project: str, queue: str) -> Steps[None]:
        yield from self._subscriptions.delete(project, queue, "")

    @operation
    def subscribed_queues(self) -> Steps[list[tuple[str, str]]]:
        return (yield from self._subscriptions.subscribed_queues())

    # Long-poll claims

    @operation
    def available_in(self, project: str, queue: str) -> Steps[float | None]:
        with unavailable:
            reply = yield self._scripts.available_in.call([self.keys.queue(project, queue)],
                                                          [self._now_arg()])
        return reply[0] / US if reply else None

    # Dead-letter moves across slots, expiry of untouched queues

    def _complete_moves(self, project: str, queue: str) -> Steps[None]:
        """Complete every dead-letter move waiting in *queue*'s outbox.

        Each move is copied into its dead-letter queue once (``move_in`` remembers the
        token), then deleted from the outbox; any process may do it, any number of times.
        """
        outbox = self.keys.outbox(project, queue)
        moves = yield self._scripts.commands.call("HGETALL", outbox)
        for token, payload in moves.items():
            target, record = msgpack.unpackb(payload, raw=True)
            yield from self._move_in(project, target.decode(), token, record)
            yield from self._forget_move(outbox, token)

    def _move_in(self, project: str, target: str, token: bytes, record: bytes
                 ) -> Steps[None]:
        """Step 2 of a move across slots: the dead-letter queue receives the message."""
        _received, listed = yield self._scripts.move_in.call(
            [self.keys.queue(project, target)],
            [self._now_arg(), token, new_nonce(), record, self._marker_ttl])
        if not listed:
            yield from self._list_queue(project, target)

    def _forget_move(self, outbox: str, token: bytes) -> Steps[None]:
        """Step 3 of a move across slots: the source's outbox lets go of it."""
        yield self._scripts.commands.call("HDEL", outbox, token)

    @operation
    def reap_queue(self, project: str, queue: str, rounds: int = 16) -> Steps[bool]:
        """Remove a queue's expired messages (bounded); True when none is left."""
        key = self.keys.queue(project, queue)
        for _ in range(rounds):
            finished, outbox = yield self._scripts.reap.call(
                [key], [self._now_arg(), READ_REAP_BUDGET, self._marker_ttl])
            if outbox:
                yield from self._complete_moves(project, queue)
            if finished:
                return True
        return False

    def _reaper_lease(self, seconds: float) -> bool:
        return bool(self._client.set(self.keys.reaper(), str(time.time()), nx=True,
                                     px=int(seconds * 1000)))

    @operation
    def reap(self) -> None:
        """One pass over every queue of every project, and over the deleted queues that
        ever had subscriptions (which outlive them), the reaper's work."""
        subscribed = {self.keys.subscribed_owner(entry.decode()) for entry, _version
                      in self._client.hscan_iter(self.keys.subscribed_versions())}
        projects_key = self.keys.projects()
        for raw_project in self._client.sscan_iter(projects_key):
            project = raw_project.decode()
            catalogue = self.keys.catalogue(project)
            for name, _score in self._client.zscan_iter(catalogue):
                self.reap_queue(project, name.decode())
                subscribed.discard((project, name.decode()))
            if self._client.zcard(catalogue) == 0:
                # Forget the project; a queue created meanwhile puts it back.
                self._client.srem(projects_key, project)
                if self._client.zcard(catalogue):
                    self._client.sadd(projects_key, project)
        for project, name in sorted(subscribed):
            self.reap_queue(project, name)

    # Audit reads. Not atomic across calls: a snapshot of a busy queue may be a little
    # ragged at its edges, which audits of history can afford.

    def trail_queues(self, project: str | None) -> list[tuple[str, str]]:
        with unavailable:
            return trail.queues(self._client, self.keys, project)

    def read_events(self, project: str, queue: str) -> Iterator[events.Event]:
        return trail.events_of(self._client, self.keys, project, queue)

    def read_messages(self, project: str, queue: str) -> Iterator[Message]:
        key = self.keys.queue(project, queue)
        prefix = key[:-1]
        with unavailable:
            nonce = self._client.hget(key, "nonce") or b""
            buckets = self._client.zrange(prefix + "bi", 0, -1)
            # The claims, read first: one made meanwhile is not seen (its messages show
            # no claim), a ragged edge like the others.
            claims = {int(number): layout.claim_name(int(number), raw)
                      for number, raw in self._client.hscan_iter(prefix + "cl")}
        as_of = round(self.now() * US)
        for bucket in buckets:
            with unavailable:
                records = self._client.hgetall(f"{prefix}b:{bucket.decode()}")
                seqs = sorted(records)
                pipe = self._client.pipeline(transaction=False)
                for seq in seqs:
                    pipe.zscore(prefix + "c", seq)
                    pipe.zscore(prefix + "wc", seq)  # claimed, due after the claim
                scores = pipe.execute()
            for seq, in_c, in_wc in zip(seqs, scores[::2], scores[1::2], strict=True):
                claim_expires = in_c if in_c is not None else in_wc
                message = layout.message(nonce, seq, records[seq], as_of, claims)
                if message.expires * US <= as_of:
                    continue
                if claim_expires is not None and message.claim_id is not None:
                    message = dataclasses.replace(message, claim_expires=claim_expires / US)
                yield message
