"""The Lua scripts of the Redis driver, loaded once and called by their SHA1.

Each ``lua/NAME.lua`` runs with ``lua/common.lua`` in front of it, so helpers are
written once; in front of both, the event-trail retention the driver was configured with
(``EVENTS_RETENTION_MS``, 0 when the trail is off) and the ``ENDED`` tally. The
script body runs as a function so that its reply can follow the tally (``wrapped``).
Redis runs a script atomically: every state transition of the driver is one script call,
whatever the number of clients and processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from redis.commands.core import Script

from delayq.storage.redis.link import ScriptLink

LUA_DIR = Path(__file__).with_name("lua")

NAMES = (
    "post", "claim", "pop", "get", "list", "stats", "delete", "delete_many",
    "claim_get", "renew", "release", "queue_create", "queue_update", "queue_drop",
    "move_in", "reap", "redrive", "available_in", "edit",
)


# Message endings a script reports (common.lua's ENDED), in the order it returns them.
ENDED = ("deleted", "popped", "dead_lettered", "expired")
ENDED_TABLE = "local ENDED = {" + ", ".join(f"{kind} = 0" for kind in ENDED) + "}\n"
# The usual report (a delete, a pop of one), made once: (counts) → kinds.
ONE_ENDED = {tuple(int(i == j) for j in range(len(ENDED))): (kind,)
             for i, kind in enumerate(ENDED)}
# The first element of a post's or claim's reply when the queue's metadata is no longer
# the one the driver passed (``Driver.queue_for_write``); no nonce looks like it.
METADATA_CHANGED = b"metadata-changed"
# The first element of a post's reply when the post would take the queue past its
# message quota; then the messages it holds and whether no expired one is left among
# them (post.lua).
QUOTA_EXCEEDED = b"quota-exceeded"


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
    """A registered script whose ENDED counts go to *report*; called like a Script.

    With a *link* (a single server), calls go through it rather than the client's
    command path (``link.py`` says why); a call naming another *client* (a cluster
    node's pipeline) takes that client's path.
    """

    def __init__(self, script: Script, report: Callable[[Iterable[str]], None],
                 link: ScriptLink | None = None) -> None:
        self.script = script
        self._report = report
        self._link = link

    def __call__(self, keys=(), args=(), client=None) -> Any:
        if self._link is not None and client is None:
            reply = self._link.evalsha(self.script.sha, self.script.script, keys, args)
        else:
            reply = self.script(keys=keys, args=args, client=client)
        return self._counted(reply)

    def on_loop(self, keys, args) -> Awaitable[Any]:
        """An awaitable of the call, awaited on the running loop
        (``delayq.steps.on_loop``): the link's own coroutine, none around it."""
        if self._link is None:  # a cluster: its clients block
            return self._blocking(keys, args)
        return self._link.evalsha_on_loop(self.script.sha, self.script.script, keys, args,
                                          self._counted)

    async def _blocking(self, keys, args) -> Any:
        return self(keys, args)

    def _counted(self, reply: list) -> Any:
        """The script's own reply, the messages it ended reported."""
        if reply[0]:  # most calls end no message
            counts = reply[1:-1]
            kinds = ONE_ENDED.get(tuple(counts))
            self._report(kinds or [kind for kind, count in zip(ENDED, counts, strict=True)
                                   for _ in range(count)])
        return reply[-1]


class Commands:
    """Plain commands as a waiter of ``delayq.steps``: ``commands(*parts)`` blocks on
    the client's path; ``on_loop(*parts)`` awaits the reply on the *link*'s pipe (a
    cluster, which has no link, blocks). Only for commands that may be sent twice
    (a connection found broken is tried once more)."""

    def __init__(self, client, link: ScriptLink | None) -> None:
        self._client = client
        self._link = link

    def __call__(self, *parts) -> Any:
        return self._client.execute_command(*parts)

    def on_loop(self, *parts) -> Awaitable[Any]:
        if self._link is None:  # a cluster: its clients block
            return self._blocking(*parts)
        return self._link.command_on_loop(parts)

    async def _blocking(self, *parts) -> Any:
        return self(*parts)


class Scripts:
    """One ``CountedScript`` per name in ``NAMES``, as attributes.

    *report* hears of every message a call ended (deleted, popped, dead_lettered,
    expired), once the script has run: a Redis script either runs whole or not at all.
    """

    def __init__(self, client, events_retention: int,
                 report: Callable[[Iterable[str]], None] = lambda kinds: None,
                 link: ScriptLink | None = None) -> None:
        common = (f"local EVENTS_RETENTION_MS = {int(events_retention) * 1000}\n"
                  f"local METADATA_CHANGED = '{METADATA_CHANGED.decode()}'\n"
                  f"local QUOTA_EXCEEDED = '{QUOTA_EXCEEDED.decode()}'\n"
                  + ENDED_TABLE + (LUA_DIR / "common.lua").read_text())
        self._link = link
        self.commands = Commands(client, link)
        self._all: list[Script] = []
        for name in NAMES:
            body = (LUA_DIR / f"{name}.lua").read_text()
            script = client.register_script(wrapped(common, body))
            setattr(self, name, CountedScript(script, report, link))
            self._all.append(script)

    def close(self) -> None:
        """Close the link's connections, if calls go through one."""
        if self._link is not None:
            self._link.close()

    def load(self, client) -> None:
        """Load every script now (on every primary of a cluster), not at first call."""
        for script in self._all:
            client.script_load(script.script)
