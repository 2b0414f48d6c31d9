"""The Lua scripts of the Redis driver, loaded once and called by their SHA1.

Each ``lua/NAME.lua`` runs with ``lua/common.lua`` in front of it, so helpers are
written once; in front of both, the event-trail retention the driver was configured with
(``EVENTS_RETENTION_MS``, 0 when the trail is off). Redis runs a script atomically:
every state transition of the driver is one script call, whatever the number of clients
and processes.
"""

from __future__ import annotations

from pathlib import Path

from redis.commands.core import Script

LUA_DIR = Path(__file__).with_name("lua")

NAMES = (
    "post", "claim", "pop", "get", "list", "stats", "delete", "delete_many",
    "claim_get", "renew", "release", "queue_create", "queue_update", "queue_drop",
    "move_in", "reap", "redrive", "edit",
)


class Scripts:
    """One registered ``Script`` per name in ``NAMES``, as attributes."""

    def __init__(self, client, events_retention: int) -> None:
        common = (f"local EVENTS_RETENTION_MS = {int(events_retention) * 1000}\n"
                  + (LUA_DIR / "common.lua").read_text())
        self._all: list[Script] = []
        for name in NAMES:
            body = (LUA_DIR / f"{name}.lua").read_text()
            script = client.register_script(f"{common}\n{body}")
            setattr(self, name, script)
            self._all.append(script)

    def load(self, client) -> None:
        """Load every script now (on every primary of a cluster), not at first call."""
        for script in self._all:
            client.script_load(script.script)
