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

A worker holds its counts and latencies in plain lists and dicts and writes them to the
prometheus_client values at most ``FLUSH_INTERVAL`` after the first one, in one go: a
value write (a lock, a pid check, a file write in multiprocess mode) for every request
and counter cost more than a tenth of what delayq adds to a request on Redis. A scrape
writes its own worker's first, so one worker's figures are exact and the others' at
most ``FLUSH_INTERVAL`` behind; a worker killed with SIGKILL loses at most that much of
its own. Until the app's event loop is known (the ASGI lifespan's startup) and after its
shutdown, every count is written at once.
"""

from __future__ import annotations

import asyncio
import bisect
import os
import threading
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
PUSHED = "delayq_messages_pushed"
PUSH_FAILURES = "delayq_push_failures"
REQUEST_SECONDS = "delayq_request_duration_seconds"

COUNTER_HELP = {
    POSTED: "Messages stored by posts.",
    CLAIMED: "Messages delivered to consumers: taken by a claim, or popped.",
    DELETED: "Messages deleted by consumers or producers, popped ones included "
             "(queue deletes and purges are not counted).",
    DEAD_LETTERED: "Messages a claim moved to their queue's dead-letter queue.",
    EXPIRED: "Messages delayq removed because their ttl had passed (see the operator "
             "guide for those a store may drop by itself).",
    PUSHED: "Messages pushed to a subscription's webhook that answered 2xx.",
    PUSH_FAILURES: "Pushes to webhooks that failed: another answer than 2xx, no answer "
                   "in time, or no connection (each is retried as its policy says).",
}

# The driver-reported endings each counter takes (see Driver.endings).
ENDINGS = {events.DELETED: DELETED, events.POPPED: DELETED,
           events.DEAD_LETTERED: DEAD_LETTERED, events.EXPIRED: EXPIRED}

# Latency buckets, in seconds: a fast local store answers in about a millisecond, a long
# claim poll or a Swift round trip takes seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0)
REQUEST_LABELS = ("method", "route", "status")
FLUSH_INTERVAL = 1.0  # seconds a count may wait in its worker before it is written


class Uncounted:
    """Counts nowhere: what a broker built without ``Metrics`` counts to (tests, tools)."""

    def count(self, name: str, amount: int) -> None:
        """Forget *amount*."""


def multiprocess_dir() -> str | None:
    """The directory workers share their values in, or None outside multiprocess mode."""
    return os.environ.get(MULTIPROC_ENV) or None


class Metrics:
    """The counters and histogram of one app, in its own registry or the shared files."""

    def __init__(self, flush_interval: float = FLUSH_INTERVAL) -> None:
        # In multiprocess mode values go to the shared files whatever registry holds the
        # metric objects; a private registry keeps them from being collected twice.
        self.registry = CollectorRegistry()
        self.counters = {name: Counter(name, text, registry=self.registry)
                         for name, text in COUNTER_HELP.items()}
        self.request_seconds = Histogram(
            REQUEST_SECONDS, "HTTP request latency, by method, route template and status "
                             "class (2xx, 4xx, 5xx); /metrics itself is left out.",
            REQUEST_LABELS, buckets=LATENCY_BUCKETS, registry=self.registry)
        self._request_children: dict[tuple[str, str | None, Any], Any] = {}
        self.flush_interval = flush_interval
        # Counts not written yet, by counter name: the amounts added, from any thread (the
        # broker counts from pool threads too). A list's append is atomic, and a flush
        # (one at a time) sums and deletes the first amounts in C, each in one step: an
        # amount appended meanwhile stays for the next flush. Latencies not written yet,
        # by (method, route template, status): their sum, then the number in each bucket
        # (+Inf last).
        self._counts: dict[str, list[int]] = {name: [] for name in COUNTER_HELP}
        self._flush_lock = threading.Lock()
        self._latencies: dict[tuple[str, str | None, Any], list[float]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_pending = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Batch counts from now on, written by a timer on *loop*."""
        self._loop = loop

    def stop(self) -> None:
        """Write every count held, and write each one at once from now on."""
        self._loop = None
        self.flush()

    def count(self, name: str, amount: int) -> None:
        """Add *amount* to counter *name* (one of this module's counter names)."""
        if amount:
            self._counts[name].append(amount)
            if not self._flush_pending:
                self._written_soon()

    def count_endings(self, kinds: Iterable[str]) -> None:
        """Count messages a driver reports gone, one event kind per message."""
        counts = self._counts
        for kind in kinds:
            name = ENDINGS.get(kind)
            if name is not None:
                counts[name].append(1)
        if not self._flush_pending:
            self._written_soon()

    def observe_request(self, method: str, route: str | None, status: Any,
                        seconds: float) -> None:
        """Observe a request's latency, from the app's event loop.

        *route* is the request's route template (None: no route matched); *status* the
        response's, as Falcon holds it ("201 Created", an int, an http.HTTPStatus):
        turned into a label when written, once per second per kind of request.
        """
        key = (method, route, status)
        if self._loop is None:  # not batching (see start)
            self._request_child(key).observe(seconds)
            return
        # No lock: while the loop is known, requests are observed and the latencies
        # written on its thread only (counts, which pool threads add too, go through
        # lists whose appends are atomic).
        held = self._latencies.get(key)
        if held is None:
            held = self._latencies[key] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        held[0] += seconds
        # The first bound at or above *seconds*, as the histogram's own observe().
        held[1 + bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        if not self._flush_pending:
            self._written_soon()

    def _written_soon(self) -> None:
        loop = self._loop
        if loop is None:
            self.flush()
            return
        self._flush_pending = True
        try:
            # Safe from the loop's thread and from pool threads alike; once a second.
            loop.call_soon_threadsafe(loop.call_later, self.flush_interval, self.flush)
        except RuntimeError:  # the loop has closed
            self._loop = None
            self.flush()

    def flush(self) -> None:
        """Write the counts held to the prometheus_client values (the shared files)."""
        # Cleared first: a count added from now on is either taken below or sees the flag
        # down and asks for a flush of its own.
        self._flush_pending = False
        latencies, self._latencies = self._latencies, {}
        with self._flush_lock:  # a flush from a pool thread may run meanwhile
            for name, amounts in self._counts.items():
                taken = len(amounts)
                if taken:
                    total = sum(amounts[:taken])
                    del amounts[:taken]
                    self.counters[name].inc(total)
        for key, held in latencies.items():
            child = self._request_child(key)
            # The histogram's observe() takes one value; its own parts take the batch.
            child._sum.inc(held[0])
            for value, count in zip(child._buckets, held[1:], strict=True):
                if count:
                    value.inc(count)

    def _request_child(self, key: tuple[str, str | None, Any]) -> Any:
        child = self._request_children.get(key)
        if child is None:
            method, route, status = key
            code = status if isinstance(status, int) else int(str(status)[:3])
            child = self.request_seconds.labels(method, route or "unmatched",
                                                f"{code // 100}xx")
            self._request_children[key] = child
        return child

    def scrape_registry(self) -> CollectorRegistry:
        """A registry holding this app's values: every worker's in multiprocess mode."""
        self.flush()  # this worker's figures are exact
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
