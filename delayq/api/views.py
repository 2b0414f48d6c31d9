"""JSON representations of queues, messages and claims, as Zaqar v2 shapes them."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import falcon

from delayq import jsontext
from delayq.claim import Claim
from delayq.message import Message
from delayq.queue import QueuePage, QueueStats
from delayq.subscription import Subscription

V2 = "/v2"
# Zaqar's checksum prefix: the algorithm, then the hex digest.
CHECKSUM_ALGORITHM = "MD5"


def queue_href(queue: str) -> str:
    return f"{V2}/queues/{queue}"


# The hrefs below spell queue_href out: one of them is made for each message a request
# names, and a call of queue_href in each was a noticeable share of that.


def message_href(queue: str, message_id: str, claim_id: str | None = None) -> str:
    if claim_id:
        return f"{V2}/queues/{queue}/messages/{message_id}?claim_id={claim_id}"
    return f"{V2}/queues/{queue}/messages/{message_id}"


def posted(queue: str, ids: list[str]) -> tuple[str, dict[str, Any]]:
    """The Location and the body of a message post's answer (201)."""
    messages = f"{V2}/queues/{queue}/messages"
    return (f"{messages}?ids={','.join(ids)}",
            {"resources": [f"{messages}/{message_id}" for message_id in ids]})


def claim_href(queue: str, claim_id: str) -> str:
    return f"{V2}/queues/{queue}/claims/{claim_id}"


def subscriptions_href(queue: str) -> str:
    return f"{V2}/queues/{queue}/subscriptions"


def subscription(queue: str, sub: Subscription) -> dict[str, Any]:
    """A subscription as Zaqar shapes it, ``confirmed`` as stored."""
    return {"id": sub.id, "source": queue, "subscriber": sub.subscriber, "ttl": sub.ttl,
            "age": sub.age, "options": sub.options, "confirmed": sub.confirmed}


def iso8601(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def checksum(body: Any) -> str | None:
    """Zaqar's checksum of a message body (``enable_checksum``): ``MD5:<hex>`` of the body
    as ``json.dumps`` writes it, encoded in UTF-8; None for a null body, to which Zaqar
    gives none.

    MD5 because Zaqar's clients expect it: the checksum tells a body changed on the way,
    it authenticates nothing.
    """
    if body is None:
        return None
    digest = hashlib.md5(jsontext.dumps(body).encode("utf-8"), usedforsecurity=False)
    return f"{CHECKSUM_ALGORITHM}:{digest.hexdigest()}"


def message(queue: str, msg: Message, *, details: bool = False,
            checksums: bool = False) -> dict[str, Any]:
    """A message as Zaqar shapes it; with *details*, delayq's extra fields too; with
    *checksums* (``enable_checksum``), its body's ``checksum`` as Zaqar gives it.

    The extra fields (creation time, delay expiry, dead-letter source and move time) are
    opt-in because python-zaqarclient builds ``Message(**view)`` and rejects any key
    beyond Zaqar's.
    """
    claim_id = msg.live_claim_id
    view = {
        "id": msg.id,
        "href": message_href(queue, msg.id, claim_id),
        "ttl": msg.ttl,
        "age": msg.age,
        "body": msg.body,
        "claim_count": msg.claim_count,
    }
    if claim_id:
        view["claim_id"] = claim_id
    if checksums and (digest := checksum(msg.body)) is not None:
        view["checksum"] = digest
    if details:
        view["created"] = iso8601(msg.created)
        view["delay_expires"] = iso8601(msg.due) if msg.is_delayed else None
        view["source_queue"] = msg.source_queue
        view["moved_at"] = iso8601(msg.moved_at) if msg.moved_at is not None else None
    return view


def claim(queue: str, clm: Claim, *, checksums: bool = False) -> dict[str, Any]:
    return {
        "age": clm.age,
        "ttl": clm.ttl,
        "grace": clm.grace,
        "href": claim_href(queue, clm.id),
        "messages": [message(queue, m, checksums=checksums) for m in clm.messages],
    }


def _stat_message(queue: str, msg: Message) -> dict[str, Any]:
    return {
        "id": msg.id,
        "age": msg.age,
        "created": iso8601(msg.created),
        "href": message_href(queue, msg.id),
        "claim_count": msg.claim_count,
    }


def stats(queue: str, st: QueueStats) -> dict[str, Any]:
    counts: dict[str, Any] = {
        "free": st.free,
        "claimed": st.claimed,
        "delayed": st.delayed,
        "total": st.total,
    }
    if st.oldest is not None:
        counts["oldest"] = _stat_message(queue, st.oldest)
    if st.newest is not None:
        counts["newest"] = _stat_message(queue, st.newest)
    return {"messages": counts}


def name_listing(kind: str, collection: str, page: QueuePage, params: Mapping[str, Any],
                 limit: int, detailed: bool) -> dict[str, Any]:
    """Zaqar's listing of queues or topics (*kind*) under *collection*: each by name and
    href, with its metadata when *detailed*, and a next link for the same listing from
    the next name on, every parameter kept."""
    listed = []
    for name, metadata in page.queues:
        view: dict[str, Any] = {"name": name, "href": f"{collection}/{name}"}
        if detailed:
            view["metadata"] = metadata
        listed.append(view)
    links = []
    if page.next_marker is not None:
        query = falcon.to_query_str({**params, "marker": page.next_marker, "limit": limit})
        links.append({"rel": "next", "href": f"{collection}{query}"})
    return {kind: listed, "links": links}


def subscription_listing(source: str, collection: str, found: list[Subscription],
                         limit: int) -> dict[str, Any]:
    """A page of *source*'s subscriptions under *collection*, with a next link from the
    last one on while the page is not empty."""
    links = []
    if found:
        query = falcon.to_query_str({"marker": found[-1].id, "limit": limit})
        links.append({"rel": "next", "href": f"{collection}{query}"})
    return {"subscriptions": [subscription(source, s) for s in found], "links": links}
