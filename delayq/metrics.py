"""Prometheus metrics: names, labels, and where their values live.

Counters and the request-latency histogram are kept per process. Under
``delayq-server`` several gunicorn workers serve one port, so the values must be summed
over workers: prometheus_client's multiprocess mode does that. The server points
``PROMETHEUS_MULTIPROC_DIR`` at a directory it empties at start, before any worker
imports prometheus_client (the library picks its storage at import time); each worker
writes its values to files there, and a scrape, whichever worker serves it, reads them
all. Without that variable (the in-process test client, an embedding application) each
app keeps its own plain registry.

Counters carry no labels: per-queue counters would grow without bound as queues come
and go, and a counter that resets when its queue is deleted is of little use.
Per-queue state is what the gauges give, read from the store at scrape time
(``delayq.api.metrics``).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, multiprocess

from delayq import events

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Counter names (prometheus_client appends ``_total``) by the event kind they count.
POSTED = "delayq_messages_posted"
CLAIMED = "delayq_messages_claimed"
DELETED = "delayq_messages_deleted"
DEAD_LETTERED = "delayq_messages_dead_lettered"
EXPIRED = "delayq_messages_expired"
REQUEST_SECONDS = "delayq_request_duration_seconds"

COUNTER_HELP = {
    POSTED: "Messages stored by posts.",
    CLAIMED: "Messages delivered to consumers: taken by a claim, or popped.",
    DELETED: "Messages deleted by consumers or producers, popped ones included "
             "(queue deletes and purges are not counted).",
    DEAD_LETTERED: "Messages a claim moved to their queue's dead-letter queue.",
    EXPIRED: "Messages delayq removed because their ttl had passed (see the operator "
             "guide for those a store may drop by itself).",
}

# The driver-reported endings each counter takes (see Driver.endings).
ENDINGS = {events.DELETED: DELETED, events.POPPED: DELETED,
           events.DEAD_LETTERED: DEAD_LETTERED, events.EXPIRED: EXPIRED}

# Latency buckets, in seconds: a fast local store answers in about a millisecond, a long
# claim poll or a Swift round trip takes seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0)
REQUEST_LABELS = ("method", "route", "status")


def multiprocess_dir() -> str | None:
    """The directory workers share their values in, or None outside multiprocess mode."""
    return os.environ.get(MULTIPROC_ENV) or None


class Metrics:
    """The counters and histogram of one app, in its own registry or the shared files."""

    def __init__(self) -> None:
        # In multiprocess mode values go to the shared files whatever registry holds the
        # metric objects; a private registry keeps them from being collected twice.
        self.registry = CollectorRegistry()
        self.counters = {name: Counter(name, text, registry=self.registry)
                         for name, text in COUNTER_HELP.items()}
        self.request_seconds = Histogram(
            REQUEST_SECONDS, "HTTP request latency, by method, route template and status "
                             "class (2xx, 4xx, 5xx); /metrics itself is left out.",
            REQUEST_LABELS, buckets=LATENCY_BUCKETS, registry=self.registry)
        self._request_children: dict[tuple[str, str, int], Any] = {}

    def count(self, name: str, amount: int) -> None:
        """Add *amount* to counter *name* (one of this module's counter names)."""
        if amount:
            self.counters[name].inc(amount)

    def count_endings(self, kinds: Iterable[str]) -> None:
        """Count messages a driver reports gone, one event kind per message."""
        for kind, amount in collections.Counter(kinds).items():
            name = ENDINGS.get(kind)
            if name is not None:
                self.counters[name].inc(amount)

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status // 100)
        child = self._request_children.get(key)
        if child is None:
            # labels() locks and builds the key each call; the set of routes, methods and
            # status classes is small and fixed, so each child is looked up once.
            child = self.request_seconds.labels(method, route, f"{status // 100}xx")
            self._request_children[key] = child
        child.observe(seconds)

    def scrape_registry(self) -> CollectorRegistry:
        """A registry holding this app's values: every worker's in multiprocess mode."""
        directory = multiprocess_dir()
        if directory is None:
            return self.registry
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=directory)
        return registry


def prepare_multiprocess_dir(directory: str) -> None:
    """Empty *directory* (creating it) for a new server's workers.

    Files left by an earlier server would be summed into this one's counters.
    """
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".db"):
            os.remove(os.path.join(directory, name))


def mark_worker_dead(pid: int) -> None:
    """Let the files of a dead worker stop counting for live-only gauges.

    Counters and histograms keep a dead worker's values (they are totals); delayq keeps
    no per-process gauges, so this only tidies up.
    """
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(pid)
