"""End to end: ``/metrics`` of a real ``delayq-server`` with two gunicorn workers sums
both workers' counters, whichever worker serves the scrape, once each worker has written
its counts (within ``FLUSH_INTERVAL``), and keeps a killed worker's counts."""

from __future__ import annotations

import os
import signal
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from delayq.metrics import FLUSH_INTERVAL
from tests.server import child_pids, delayq_server

pytestmark = pytest.mark.timeout(180)

POSTS = 40
POST_ROUTE = (("method", "POST"), ("route", "/v2/queues/{name}/messages"), ("status", "2xx"))


def headers() -> dict[str, str]:
    return {"Client-ID": str(uuid.uuid4()), "X-Project-ID": "e2e-metrics"}


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    # A new connection each time, so scrapes land on either worker.
    response = httpx.get(f"{url}/metrics", timeout=15)
    assert response.status_code == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def workers_of(server, count: int = 2, timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(child_pids(server.proc.pid)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = child_pids(server.proc.pid)
    assert len(workers) == count, server.stderr()
    return workers


def test_counters_sum_over_workers_and_survive_a_killed_worker(tmp_path):
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"stale")  # an earlier server's: wiped
    with delayq_server(tmp_path, config={"drivers:transport:wsgi": {"workers": 2}},
                       args=["--metrics-dir", str(metrics_dir)]) as server:
        workers = workers_of(server)
        for i in range(POSTS):
            response = httpx.post(f"{server.url}/v2/queues/q{i % 3}/messages",
                                  headers=headers(), json={"messages": [{"body": i}]},
                                  timeout=15)
            assert response.status_code == 201, response.text
        # Both workers served posts and counted in files of their own.
        counted = {int(name.split("_")[1].split(".")[0])
                   for name in os.listdir(metrics_dir) if name.startswith("counter_")}
        assert set(workers) <= counted, (workers, counted)
        # Each worker writes its counts within FLUSH_INTERVAL (slack for a busy machine);
        # from then on every scrape, whichever worker serves it, has them all.
        deadline = time.monotonic() + FLUSH_INTERVAL + 10
        while scrape(server.url).get(("delayq_messages_posted_total", ())) != POSTS:
            assert time.monotonic() < deadline, scrape(server.url)
            time.sleep(0.1)
        for _ in range(10):
            samples = scrape(server.url)
            assert samples[("delayq_messages_posted_total", ())] == POSTS
            assert samples[("delayq_request_duration_seconds_count", POST_ROUTE)] == POSTS

        # A worker that dies (and is replaced) still counts in the totals.
        os.kill(workers[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while workers[0] in child_pids(server.proc.pid) or \
                len(child_pids(server.proc.pid)) < 2:
            assert time.monotonic() < deadline, server.stderr()
            time.sleep(0.1)
        for _ in range(4):
            samples = scrape(server.url)
            assert samples[("delayq_messages_posted_total", ())] == POSTS
