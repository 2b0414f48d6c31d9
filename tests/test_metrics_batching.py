"""``Metrics`` holds counts in its worker and writes them in batches: what a scrape shows
is what observing each request at once would have shown, at most ``flush_interval``
later, and at once for the worker serving the scrape."""

from __future__ import annotations

import asyncio
import itertools
import threading
from http import HTTPStatus

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from delayq.metrics import LATENCY_BUCKETS, POSTED, REQUEST_SECONDS, Metrics

ROUTE = "/v2/queues/{name}/messages"
# On bounds, between them, below the first and above the last (+Inf).
LATENCIES = (0.0, 0.0005, 0.001, 0.0011, 0.0025, 0.03, 0.1, 9.99, 10.0, 10.5, 120.0)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect() for s in family.samples
            if not s.name.endswith("_created")}


def posted(metrics: Metrics) -> float:
    return samples(metrics.registry)[("delayq_messages_posted_total", ())]


def test_a_batch_writes_what_observing_each_request_would():
    metrics = Metrics(flush_interval=3600)
    reference = CollectorRegistry()
    histogram = Histogram(REQUEST_SECONDS, "reference", ("method", "route", "status"),
                          buckets=LATENCY_BUCKETS, registry=reference)

    async def run() -> None:
        metrics.start(asyncio.get_running_loop())
        # Statuses as Falcon holds them: one series whatever the form.
        statuses = itertools.cycle((201, "201 Created", HTTPStatus.NO_CONTENT))
        for seconds, status in zip(LATENCIES, statuses, strict=False):
            metrics.observe_request("POST", ROUTE, status, seconds)
            histogram.labels("POST", ROUTE, "2xx").observe(seconds)
        metrics.observe_request("GET", ROUTE, 404, 0.002)
        histogram.labels("GET", ROUTE, "4xx").observe(0.002)
        metrics.count(POSTED, 3)
        metrics.count(POSTED, 4)

    asyncio.run(run())
    # Held, not written: the interval is an hour.
    assert posted(metrics) == 0
    assert not [key for key in samples(metrics.registry) if key[0].startswith(REQUEST_SECONDS)]

    metrics.flush()
    assert posted(metrics) == 7
    ours = {key: value for key, value in samples(metrics.registry).items()
            if key[0].startswith(REQUEST_SECONDS)}
    assert ours == samples(reference)
    assert ours[(f"{REQUEST_SECONDS}_count", (("method", "POST"), ("route", ROUTE),
                                              ("status", "2xx")))] == len(LATENCIES)


def test_held_counts_are_written_within_the_interval_and_by_a_scrape():
    metrics = Metrics(flush_interval=0.2)

    async def run() -> list[float]:
        metrics.start(asyncio.get_running_loop())
        metrics.count(POSTED, 2)
        seen = [posted(metrics)]
        await asyncio.sleep(0.6)
        seen.append(posted(metrics))
        # From a pool thread, as the broker counts when storage calls run off the loop.
        thread = threading.Thread(target=metrics.count, args=(POSTED, 5))
        thread.start()
        thread.join()
        seen.append(posted(metrics))
        await asyncio.sleep(0.6)
        seen.append(posted(metrics))
        metrics.count(POSTED, 1)
        seen.append(posted(metrics))
        text = generate_latest(metrics.scrape_registry()).decode()
        seen.append(float(text.split("\ndelayq_messages_posted_total ")[1].split()[0]))
        return seen

    assert asyncio.run(run()) == [0, 2, 2, 7, 7, 8]


def test_without_a_started_loop_or_after_stop_each_count_is_written_at_once():
    metrics = Metrics(flush_interval=3600)
    metrics.count(POSTED, 1)
    assert posted(metrics) == 1

    async def run() -> None:
        metrics.start(asyncio.get_running_loop())
        metrics.count(POSTED, 1)
        assert posted(metrics) == 1
        metrics.stop()  # the lifespan's shutdown: what is held is written
        assert posted(metrics) == 2
        metrics.count(POSTED, 1)
        assert posted(metrics) == 3

    asyncio.run(run())


def test_counts_from_many_threads_are_all_written_while_flushes_run():
    # Pool threads count while the loop's timer flushes (and, once the loop is gone,
    # while each count flushes at once, from every thread): no count is lost or doubled.
    threads, each = 8, 3000
    metrics = Metrics(flush_interval=0.001)

    def work() -> None:
        for _ in range(each):
            metrics.count(POSTED, 1)
        metrics.count_endings(["deleted", "popped", "expired"])

    async def run() -> None:
        metrics.start(asyncio.get_running_loop())
        await asyncio.gather(*(asyncio.to_thread(work) for _ in range(threads)))
        metrics.stop()

    asyncio.run(run())
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert posted(metrics) == 2 * threads * each
    values = samples(metrics.registry)
    assert values[("delayq_messages_deleted_total", ())] == 2 * threads * 2
    assert values[("delayq_messages_expired_total", ())] == 2 * threads
