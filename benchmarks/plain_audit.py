"""The audits of docs/audits.md as one plain Python pass over a store's trail.

The baseline ``benchmarks/audit.py`` times ``delayq-audit`` against: the events read
through the driver (``trail_queues``, ``read_events``), grouped per message in dicts,
every figure worked out in this one process. It follows the rules of docs/audits.md
("What the figures mean") independently of the Spark code, so the benchmark also checks
that both give the same rows.

    rows = plain_audit.audit(driver, as_of)   # {"delay": [...], "dead_letter": [...]}
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from delayq import events as ev

SAMPLE_IDS = 10
TOP = 10
DELIVERIES = {ev.CLAIMED, ev.POPPED}
ENDS = {ev.POPPED, ev.DELETED, ev.DEAD_LETTERED, ev.REDRIVEN, ev.EXPIRED}
EXPIRY_ORDER = {ev.POSTED: 1, ev.CLAIMED: 2, ev.DEAD_LETTERED: 3}
DUE_ORDER = {ev.POSTED: 1, ev.EDITED: 2}
ENDINGS = (ev.DELETED, ev.POPPED, ev.EXPIRED, ev.REDRIVEN, ev.DEAD_LETTERED, ev.PURGED)


def percentile(ordered: list[float], p: float) -> float:
    rank = p * (len(ordered) - 1)
    i = math.floor(rank)
    if i + 1 >= len(ordered):
        return ordered[i]
    return ordered[i] + (ordered[i + 1] - ordered[i]) * (rank - i)


def distribution(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"p50": round(percentile(ordered, 0.5), 6), "p90": round(percentile(ordered, 0.9), 6),
            "p99": round(percentile(ordered, 0.99), 6), "max": round(float(ordered[-1]), 6)}


def read(driver: Any, as_of: float) -> tuple[dict, dict]:
    """Every message's events (project, message id -> list of Event), and every queue's
    purge times ((project, queue) -> list), at or before *as_of*."""
    messages: dict[tuple[str, str], list[ev.Event]] = defaultdict(list)
    purges: dict[tuple[str, str], list[float]] = defaultdict(list)
    for project, queue in driver.trail.queues(None):
        for event in driver.trail.events(project, queue):
            if event.time > as_of:
                continue
            if event.message_id is None:
                purges[(project, queue)].append(event.time)
            else:
                messages[(project, event.message_id)].append(event)
    return messages, purges


class Message:
    """The facts of one message that do not depend on a stay."""

    def __init__(self, history: list[ev.Event]) -> None:
        self.history = history
        deliveries = [e.time for e in history if e.kind in DELIVERIES]
        self.first_delivery = min(deliveries) if deliveries else None
        changes = [(e.time, DUE_ORDER[e.kind], e.due) for e in history if e.kind in DUE_ORDER
                   and (self.first_delivery is None or e.time <= self.first_delivery)]
        self.due_in_force = max(changes)[2] if changes else None
        known = [(e.time, e.claim_count or 0, EXPIRY_ORDER[e.kind], e.expires)
                 for e in history if e.kind in EXPIRY_ORDER]
        self.expiry = max(known)[3] if known else None

    def end(self, queue: str, start: float, purge_times: Iterable[float], as_of: float
            ) -> tuple[float | None, str | None]:
        """(time, kind) the stay in *queue* from *start* ended; (None, None) if not."""
        explicit = [(e.time, e.kind) for e in self.history
                    if e.queue == queue and e.kind in ENDS and e.time >= start]
        if explicit:
            return min(explicit)
        later = [t for t in purge_times if t >= start]
        purge = min(later) if later else None
        if self.expiry is not None and self.expiry <= as_of:
            implicit = max(self.expiry, start)
            if purge is None or implicit <= purge:
                return implicit, ev.EXPIRED
        return (purge, ev.PURGED) if purge is not None else (None, None)


def key_values(body: Any) -> list[tuple[str, str | None]]:
    """(dotted key, scalar value as compact JSON or None) of a decoded body."""
    if not isinstance(body, dict):
        return [("", scalar(body))]
    found = []
    pending = [("", body)]
    while pending:
        prefix, obj = pending.pop()
        for key, value in obj.items():
            found.append((prefix + key, scalar(value)))
            if isinstance(value, dict):
                pending.append((prefix + key + ".", value))
    return found


def scalar(value: Any) -> str | None:
    if isinstance(value, dict | list):
        return None
    return json.dumps(value, ensure_ascii=False)


def top(counted: dict, key: Any) -> list:
    return sorted(counted.items(), key=key)[:TOP]


def audit(driver: Any, as_of: float) -> dict[str, list[dict[str, Any]]]:
    """The delay and dead-letter rows of the store *driver* reads, as of *as_of*."""
    messages, purges = read(driver, as_of)
    posts: dict[tuple[str, str], list] = defaultdict(list)
    moves: dict[tuple[str, str, str], list] = defaultdict(list)
    received: dict[tuple[str, str], int] = defaultdict(int)
    for (project, message_id), history in messages.items():
        facts = Message(history)
        for e in history:
            if e.kind == ev.POSTED:
                received[(project, e.queue)] += 1
                end = facts.end(e.queue, e.time, purges.get((project, e.queue), ()), as_of)
                posts[(project, e.queue)].append((message_id, e, facts, end))
            elif e.kind in (ev.DEAD_LETTERED, ev.REDRIVEN):
                received[(project, e.target)] += 1
            if e.kind == ev.DEAD_LETTERED:
                end = facts.end(e.target, e.time, purges.get((project, e.target), ()), as_of)
                moves[(project, e.target, e.source)].append((message_id, e, end))
    delay = [delay_row(project, queue, stays, as_of)
             for (project, queue), stays in sorted(posts.items())]
    dead = [dead_letter_row(key, stays, received[(key[0], key[2])])
            for key, stays in sorted(moves.items())]
    return {"delay": delay, "dead_letter": dead}


def delay_row(project: str, queue: str, stays: list, as_of: float) -> dict[str, Any]:
    delays, lateness, early, expired_before_due, waiting = [], [], [], 0, 0
    delayed = 0
    for message_id, post, facts, (end_time, end_kind) in stays:
        delay = post.due - post.time
        if delay <= 0:
            continue
        delayed += 1
        delays.append(delay)
        due = facts.due_in_force
        if facts.first_delivery is not None:
            late = facts.first_delivery - due
            lateness.append(late)
            if late < 0:
                early.append((late, message_id))
        elif end_kind == ev.EXPIRED and end_time <= due:
            expired_before_due += 1
        elif end_time is None and due > as_of:
            waiting += 1
    return {"project": project, "queue": queue, "messages": len(stays), "delayed": delayed,
            "delay_seconds": distribution(delays), "delivered": len(lateness),
            "lateness_seconds": distribution(lateness), "early_deliveries": len(early),
            "early_delivery_ids": [i for _, i in sorted(early)[:SAMPLE_IDS]],
            "expired_before_due": expired_before_due, "waiting": waiting}


def dead_letter_row(key: tuple[str, str, str], stays: list, received: int
                    ) -> dict[str, Any]:
    project, queue, source = key
    counts = [move.claim_count for _, move, _ in stays if move.claim_count is not None]
    histogram: dict[int, int] = defaultdict(int)
    for count in counts:
        histogram[count] += 1
    endings = dict.fromkeys(ENDINGS, 0)
    times, keys, values, latest = [], defaultdict(set), defaultdict(set), {}
    for message_id, move, (end_time, end_kind) in stays:
        if end_time is not None:
            times.append(end_time - move.time)
            endings[end_kind] += 1
        latest[message_id] = max(latest.get(message_id, move.time), move.time)
        if move.body is not None:
            for k, v in key_values(json.loads(move.body)):
                keys[k].add(message_id)
                if v is not None:
                    values[(k, v)].add(message_id)
    moved = len(stays)
    return {
        "project": project, "queue": queue, "source": source, "moved": moved,
        "moved_messages": len(latest), "received": received,
        "dead_letter_rate": round(moved / received, 6) if received else None,
        "claim_count": {"histogram": {str(c): histogram[c] for c in sorted(histogram)},
                        "p50": round(percentile(sorted(counts), 0.5), 6),
                        "max": max(counts)},
        "time_in_dlq_seconds": distribution(times), "left": len(times),
        "still_in_dlq": moved - len(times), "endings": endings,
        "latest_moved_ids": [i for _, i in sorted((-t, i) for i, t in latest.items())
                             ][:SAMPLE_IDS],
        "top_keys": [{"key": k, "count": len(ids)}
                     for k, ids in top(keys, lambda kv: (-len(kv[1]), kv[0]))],
        "top_values": [{"key": k, "value": v, "count": len(ids)}
                       for (k, v), ids in top(values, lambda kv: (-len(kv[1]), kv[0]))],
    }


def main(argv: list[str]) -> int:
    """``python plain_audit.py DATABASE AS_OF OUT``: the plain pass over a SQLite store,
    its rows written to OUT as JSON (``benchmarks/audit.py`` runs it in a process of its
    own, to measure its CPU time and peak memory alone)."""
    from delayq.storage.sqlite.driver import Driver
    from delayq.synchronous import Synchronous

    database, as_of, out = argv
    driver = Synchronous(Driver(database))
    try:
        rows = audit(driver, float(as_of))
    finally:
        driver.close()
    with open(out, "w") as written:
        json.dump(rows, written)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
