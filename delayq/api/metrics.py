"""``GET /metrics`` (Prometheus text format) and the request-latency middleware.

The per-queue gauges are read from the store at scrape time, by the worker serving the
scrape, through the driver's ``queue_counts`` (O(log n) per queue on SQLite and Redis,
O(1) in the messages on MongoDB and Swift): nothing per queue is kept in the workers,
so they never disagree and a deleted queue's series simply stop. A scrape names the
projects whose queues it wants (``?project=NAME``, repeatable); each contributes at most
``MAX_GAUGE_QUEUES`` queues, in name order, so one scrape's cost is bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from typing import Any

import falcon
import falcon.asgi
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from delayq import validation
from delayq.broker import Broker
from delayq.errors import ValidationError
from delayq.metrics import Metrics
from delayq.offload import Offload
from delayq.queue import QueueCounts

PATH = "/metrics"
MAX_GAUGE_QUEUES = 1000
MAX_GAUGE_PROJECTS = 20
GAUGE_LABELS = ("project", "queue")
GAUGES = (("free", "delayq_queue_free_messages",
           "Messages a claim could take now."),
          ("claimed", "delayq_queue_claimed_messages",
           "Messages held by a live claim."),
          ("delayed", "delayq_queue_delayed_messages",
           "Messages whose delay has not passed yet."))


class RequestTimer:
    """Middleware: observes every request's latency, labelled by its route template.

    The template (``/v2/queues/{name}/messages``), not the path, keeps the number of
    series bounded; a request no route matched is labelled ``unmatched``. The app must
    use ``delayq.api.request.Request`` (it holds the start time). The ASGI lifespan
    starts and stops the batching of the counts (``Metrics.start``).
    """

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def process_startup(self, scope: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        self.metrics.start(asyncio.get_running_loop())

    async def process_shutdown(self, scope: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        self.metrics.stop()

    async def process_response(self, req: falcon.asgi.Request, resp: falcon.asgi.Response,
                               resource: object, req_succeeded: bool) -> None:
        route = req.uri_template
        if route != PATH:
            self.metrics.observe_request(req.method, route, resp.status,
                                         time.perf_counter() - req.context.started)


class QueueGauges(Collector):
    """Free, claimed and delayed counts of the queues of some projects, read now."""

    def __init__(self, counts: list[tuple[str, str, QueueCounts]]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for field, name, text in GAUGES:
            family = GaugeMetricFamily(name, text, labels=GAUGE_LABELS)
            for project, queue, counts in self.counts:
                family.add_metric([project, queue], getattr(counts, field))
            yield family


class MetricsResource:
    """``/metrics``: counters and latency of every worker, gauges of asked-for projects."""

    def __init__(self, *, broker: Broker, offload: Offload, metrics: Metrics) -> None:
        self.broker = broker
        self.offload = offload
        self.metrics = metrics

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        projects = req.get_param_as_list("project") or []
        if len(projects) > MAX_GAUGE_PROJECTS:
            raise ValidationError(f"At most {MAX_GAUGE_PROJECTS} project parameters.")
        projects = [validation.project_id(p) for p in dict.fromkeys(projects)]
        counts = await self.broker.queue_gauges(projects, MAX_GAUGE_QUEUES)
        registry = self.metrics.scrape_registry()
        # Reading the workers' metric files blocks.
        text = await self.offload(render, registry, QueueGauges(counts))
        resp.data = text
        resp.content_type = CONTENT_TYPE_LATEST


def render(registry: CollectorRegistry, gauges: QueueGauges) -> bytes:
    """The exposition text of *registry* followed by *gauges*."""
    extra = CollectorRegistry(auto_describe=False)
    extra.register(gauges)
    return generate_latest(registry) + generate_latest(extra)
