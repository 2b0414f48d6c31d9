"""Which MongoDB change events are signals (``delayq.storage.base.signals``), and the
signal each one is: the change stream's pipeline, and the translation of its events.

The writes themselves are the signals; nothing is written for them:

- ``messages``: an insert (a post, keyed or not) signals ``MESSAGES`` for its queue. So
  does an update that sets the availability ``a`` without setting a claim expiry
  ``ce``: a release, a hand-back, an edit of the delay, a dead-letter move, a redrive.
  Claims and renewals set ``ce`` with ``a`` (the message becomes claimable later, not
  sooner), so they are left out, and with them the hot path's updates.
- ``subscriptions``: an insert, update, replace or delete signals ``SUBSCRIPTIONS``.

The server filters with ``$match`` and trims each event with ``$project`` to the few
fields read here, so a process receives no bodies and no claims.

Where the event names its queue: an insert's (or replace's) ``fullDocument``; a move's
or redrive's ``updatedFields.q`` (the queue it lands in); the ``documentKey`` when the
collection is sharded on ``p`` (``documentKey`` then carries the shard key). A release,
a hand-back or an edit changes neither ``p`` nor ``q``, and MongoDB leaves unchanged
fields out of ``updateDescription``, so its event tells only the message's ``_id``: that
is ``Unresolved``, looked up by ``_id`` (``signals.py`` says how, and why not
``fullDocument: updateLookup``). A subscription's update or delete tells only its
``_id`` too: ``signals.py`` keeps the queue of each subscription id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from delayq.storage.base.signals import Change, Signal
from delayq.storage.mongo import layout as lay

# Change event fields and operation types, as the MongoDB manual names them.
OPERATION = "operationType"
NAMESPACE = "ns"
COLLECTION = "coll"
DOCUMENT_KEY = "documentKey"
FULL_DOCUMENT = "fullDocument"
UPDATE = "updateDescription"
UPDATED_FIELDS = "updatedFields"
INSERT, UPDATE_OP, REPLACE, DELETE = "insert", "update", "replace", "delete"

# What each collection's writes signal, and which of its operations do.
CHANGES = {lay.MESSAGES: Change.MESSAGES, lay.SUBSCRIPTIONS: Change.SUBSCRIPTIONS}
OPERATIONS = {
    Change.MESSAGES: frozenset({INSERT, UPDATE_OP}),
    Change.SUBSCRIPTIONS: frozenset({INSERT, UPDATE_OP, REPLACE, DELETE}),
}

_UPDATED = f"{UPDATE}.{UPDATED_FIELDS}"


def pipeline() -> list[dict[str, Any]]:
    """The change stream's stages: the events that signal, each trimmed to what
    ``translate`` reads (``_id``, the resume token, always stays)."""
    return [
        {"$match": {"$or": [
            {f"{NAMESPACE}.{COLLECTION}": lay.MESSAGES, OPERATION: INSERT},
            {f"{NAMESPACE}.{COLLECTION}": lay.MESSAGES, OPERATION: UPDATE_OP,
             f"{_UPDATED}.{lay.AVAILABLE}": {"$exists": True},
             f"{_UPDATED}.{lay.CLAIM_EXPIRES}": {"$exists": False}},
            {f"{NAMESPACE}.{COLLECTION}": lay.SUBSCRIPTIONS,
             OPERATION: {"$in": sorted(OPERATIONS[Change.SUBSCRIPTIONS])}},
        ]}},
        {"$project": {
            OPERATION: 1, f"{NAMESPACE}.{COLLECTION}": 1, DOCUMENT_KEY: 1,
            f"{FULL_DOCUMENT}.{lay.PROJECT}": 1, f"{FULL_DOCUMENT}.{lay.QUEUE}": 1,
            f"{_UPDATED}.{lay.QUEUE}": 1,
            # Read by ``translate`` to tell a release from a claim should the server
            # not have filtered (it always does; the translation stands on its own).
            f"{_UPDATED}.{lay.AVAILABLE}": 1, f"{_UPDATED}.{lay.CLAIM_EXPIRES}": 1,
        }},
    ]


@dataclass(frozen=True, slots=True)
class Unresolved:
    """A signal whose event did not say all of its queue: the document's ``_id``, and
    the project and queue when the event gave them."""

    change: Change
    id: Any
    project: str | None = None
    queue: str | None = None
    deleted: bool = False  # a delete: the document is gone, only a memory of it helps


def translate(event: Mapping[str, Any]) -> Signal | Unresolved | None:
    """The signal a change event is, as far as the event tells; None when it is none."""
    change = CHANGES.get(str((event.get(NAMESPACE) or {}).get(COLLECTION)))
    operation = event.get(OPERATION)
    if change is None or operation not in OPERATIONS[change]:
        return None
    updated = (event.get(UPDATE) or {}).get(UPDATED_FIELDS) or {}
    if (change is Change.MESSAGES and operation == UPDATE_OP
            and (lay.AVAILABLE not in updated or lay.CLAIM_EXPIRES in updated)):
        return None  # a claim, a renewal, a body edit: nothing claimable sooner
    key = event.get(DOCUMENT_KEY) or {}
    full = event.get(FULL_DOCUMENT) or {}
    project = full.get(lay.PROJECT, key.get(lay.PROJECT))
    queue = full.get(lay.QUEUE, updated.get(lay.QUEUE, key.get(lay.QUEUE)))
    if project is not None and queue is not None:
        return Signal(change, project, queue)
    return Unresolved(change, key.get(lay.ID), project, queue, operation == DELETE)


def subscription_queue(event: Mapping[str, Any]) -> tuple[Any, tuple[str, str]] | None:
    """``(_id, (project, queue))`` of a subscription an insert or replace event wrote;
    None for any other event."""
    if ((event.get(NAMESPACE) or {}).get(COLLECTION) != lay.SUBSCRIPTIONS
            or event.get(OPERATION) not in (INSERT, REPLACE)):
        return None
    full = event.get(FULL_DOCUMENT) or {}
    key = event.get(DOCUMENT_KEY) or {}
    if lay.PROJECT not in full or lay.QUEUE not in full or lay.ID not in key:
        return None
    return key[lay.ID], (full[lay.PROJECT], full[lay.QUEUE])
