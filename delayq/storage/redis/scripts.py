"""The Lua scripts of the Redis driver, loaded once and called by their SHA1.

Each ``lua/NAME.lua`` runs with ``lua/common.lua`` in front of it, so helpers are
written once; in front of both, the event-trail retention the driver was configured with
(``EVENTS_RETENTION_MS``, 0 when the trail is off), the signals' channel and whether
they go by shard (``signal_settings``) and the ``ENDED`` tally. The
script body runs as a function so that its reply can follow the tally (``wrapped``).
Redis runs a script atomically: every state transition of the driver is one script call,
whatever the number of clients and processes.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from delayq.retry import Backoff
from delayq.storage.base.signals import Change
from delayq.storage.redis.calls import Calls

LUA_DIR = Path(__file__).with_name("lua")

# Work bounds per script call: Redis runs one script at a time, so no call may run long.
CLAIM_BUDGET = 256  # expired or dead-lettered candidates a claim or pop skips per call
LIST_BUDGET = 1000  # records a listing reads per call
WRITE_REAP_BUDGET = 2  # expiry buckets each write reaps on the side
REDRIVE_SKIP_BUDGET = 10_000  # messages without a source a redrive steps over per call
READ_REAP_BUDGET = 64  # expiry buckets a stats call reaps per call before counting

NAMES = (
    "post", "claim", "pop", "get", "list", "stats", "delete", "delete_many",
    "claim_get", "renew", "release", "release_message", "queue_create", "queue_update",
    "queue_drop", "move_in", "reap", "redrive", "available_in", "edit",
    "subscription_create", "subscription_get", "subscription_list", "subscription_update",
    "subscription_delete", "subscribed", "subscribed_reserve", "subscribed_update",
    "catalogue_reserve", "catalogue_settle", "catalogue_unlist",
)


# Message endings a script reports (common.lua's ENDED), in the order it returns them.
ENDED = ("deleted", "popped", "dead_lettered", "expired")
ENDED_TABLE = "local ENDED = {" + ", ".join(f"{kind} = 0" for kind in ENDED) + "}\n"
# The usual report (a delete, a pop of one), made once: (counts) → kinds.
ONE_ENDED = {tuple(int(i == j) for j in range(len(ENDED))): (kind,)
             for i, kind in enumerate(ENDED)}
# The first element of a post's or claim's reply when the queue's metadata is no longer
# the one the driver passed (``Queues.for_write``); no nonce looks like it.
METADATA_CHANGED = b"metadata-changed"
# The first element of a post's reply when the post would take the queue past its
# message quota; then the messages it holds and whether no expired one is left among
# them (post.lua).
QUOTA_EXCEEDED = b"quota-exceeded"
# The only element of a post's reply when the queue does not exist and the post's fence
# forbids making it (post.lua): the queue quota needs a hold first (catalogue.py).
QUEUE_MISSING = b"queue-missing"
# The two arguments of a claim, renewal or release without a retry policy.
NO_BACKOFF = ("", "")


@functools.lru_cache(maxsize=1024)  # a queue's claims all pass the same one
def _backoff_args(backoff: Backoff) -> tuple[str, str]:
    at = "" if backoff.dead_letter_at is None else str(backoff.dead_letter_at)
    return at, ",".join(map(str, backoff.delays))


def backoff_args(backoff: Backoff | None) -> tuple[str, str]:
    """A retry policy's waits as the two script arguments common.lua's ``backoff_of``
    reads: the attempt from which there is no wait ('' = none), and the waits in
    seconds, comma-separated ('' with no policy)."""
    return NO_BACKOFF if backoff is None else _backoff_args(backoff)


# The first element of a post's reply when the queue keeps the post's idempotency key;
# then what it keeps: the digest and the ids, comma-separated.
KEY_TAKEN = b"key-taken"


def lua_string(text: str) -> str:
    """*text* as a Lua string literal."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{escaped}'"


def signal_settings(channel: str, sharded: bool) -> str:
    """What ``signal`` (common.lua) needs: the channel of every process, whether a
    queue's ``MESSAGES`` go to its channel by shard (a cluster), and the payload's
    letter of each change."""
    return (f"local SIGNALS = {lua_string(channel)}\n"
            f"local SIGNALS_SHARDED = {'true' if sharded else 'false'}\n"
            f"local SIGNAL_MESSAGES = {lua_string(Change.MESSAGES.value)}\n"
            f"local SIGNAL_SUBSCRIPTIONS = {lua_string(Change.SUBSCRIPTIONS.value)}\n")


def wrapped(common: str, body: str) -> str:
    """*body* run as a function after *common*; its reply goes last, behind the number
    of messages the call ended and the ENDED counts.

    A nil reply is sent as ``false`` (which Redis sends as nil too): a Lua table stops at
    its first nil, and the reply must be where the caller looks for it.
    """
    counts = ", ".join(f"ENDED.{kind}" for kind in ENDED)
    total = " + ".join(f"ENDED.{kind}" for kind in ENDED)
    # The reply first: a table constructor reads ENDED before calling script().
    return (f"{common}\nlocal function script()\n{body}\nend\n"
            f"local reply = script()\nreturn {{{total}, {counts}, reply or false}}\n")


class CountedScript:
    """A script (SHA1 ``sha`` of ``source``) whose ENDED counts go to *report*;
    ``await call(keys, args)`` is one call of it (``calls.py`` says how it is made)."""

    __slots__ = ("sha", "source", "report", "calls")

    def __init__(self, source: str, report: Callable[[Iterable[str]], None],
                 calls: Calls) -> None:
        self.source = self.sha = ""
        self.use(source)
        self.report = report
        self.calls = calls

    def use(self, source: str) -> None:
        """Call *source* from now on."""
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def call(self, keys: list[Any], args: list[Any]) -> Any:
        if self.calls.connection.clustered is None:
            # Connecting settles the source (``Scripts.shard_signals``): read it after.
            await self.calls.connection.clients()
        return self.counted(await self.calls.script(self.sha, self.source, keys, args))

    def counted(self, reply: list) -> Any:
        """The script's own reply, the messages it ended reported."""
        if reply[0]:  # most calls end no message
            counts = reply[1:-1]
            kinds = ONE_ENDED.get(tuple(counts))
            self.report(kinds or [kind for kind, count in zip(ENDED, counts, strict=True)
                                  for _ in range(count)])
        return reply[-1]


class Scripts:
    """One ``CountedScript`` per name in ``NAMES``, as attributes, called through
    *calls* (whose plain commands the driver makes too).

    *report* hears of every message a call ended (deleted, popped, dead_lettered,
    expired), once the script has run: a Redis script either runs whole or not at all.
    The scripts signal on *signals* (``KeyNames.signals``), and on a cluster by shard
    once ``shard_signals`` says so.
    """

    post: CountedScript
    claim: CountedScript
    pop: CountedScript
    get: CountedScript
    list: CountedScript
    stats: CountedScript
    delete: CountedScript
    delete_many: CountedScript
    claim_get: CountedScript
    renew: CountedScript
    release: CountedScript
    release_message: CountedScript
    queue_create: CountedScript
    queue_update: CountedScript
    queue_drop: CountedScript
    move_in: CountedScript
    reap: CountedScript
    redrive: CountedScript
    available_in: CountedScript
    edit: CountedScript
    subscription_create: CountedScript
    subscription_get: CountedScript
    subscription_list: CountedScript
    subscription_update: CountedScript
    subscription_delete: CountedScript
    subscribed: CountedScript
    subscribed_reserve: CountedScript
    subscribed_update: CountedScript
    catalogue_reserve: CountedScript
    catalogue_settle: CountedScript
    catalogue_unlist: CountedScript

    def __init__(self, calls: Calls, events_retention: int,
                 report: Callable[[Iterable[str]], None] = lambda kinds: None, *,
                 signals: str = "dq:signals") -> None:
        self._settings = (f"local EVENTS_RETENTION_MS = {int(events_retention) * 1000}\n"
                          f"local METADATA_CHANGED = '{METADATA_CHANGED.decode()}'\n"
                          f"local QUOTA_EXCEEDED = '{QUOTA_EXCEEDED.decode()}'\n"
                          f"local KEY_TAKEN = '{KEY_TAKEN.decode()}'\n"
                          f"local QUEUE_MISSING = '{QUEUE_MISSING.decode()}'\n")
        self._common = ENDED_TABLE + (LUA_DIR / "common.lua").read_text()
        self._signals = signals
        self.sharded = False
        self.calls = calls
        self._all: list[CountedScript] = []  # in the order of NAMES
        for name in NAMES:
            script = CountedScript(self._source(name), report, calls)
            setattr(self, name, script)
            self._all.append(script)

    def _source(self, name: str) -> str:
        common = (self._settings + signal_settings(self._signals, self.sharded)
                  + self._common)
        return wrapped(common, (LUA_DIR / f"{name}.lua").read_text())

    def shard_signals(self, sharded: bool) -> None:
        """Signal ``MESSAGES`` by shard (on a cluster: *sharded*) or not; before any
        call, since the source, hence the hash, of every script changes."""
        if sharded != self.sharded:
            self.sharded = sharded
            for name, script in zip(NAMES, self._all, strict=True):
                script.use(self._source(name))

    async def load(self, client: Any) -> None:
        """Load every script now (on every primary of a cluster), not at first call."""
        for script in self._all:
            await client.script_load(script.source)
