"""Scrape cost of the per-queue gauges: ``GET /metrics?project=P`` with a large delayed
backlog in P's queue, over the same scrape of a project whose queue is empty.

The app runs in process (Falcon's test client, no gunicorn: the gauges are read by the
worker serving the scrape, so one process measures exactly their cost) on a fresh store.
``--backlog`` delayed messages (due in a day) are posted straight through the driver
into ``bench-backlog``'s queue; ``bench-empty``'s queue holds none. Each round scrapes
both projects in random order; reported are the median and p90 of each and the ratio of
the medians. A ratio near 1 means the gauges do not scan the backlog.

Usage::

    python benchmarks/metrics_gauges.py [--driver sqlite|redis|mongodb] [--backlog 1000000]
                                        [--samples 200]

``--driver redis`` starts a private ``redis-server`` (benchmarks/backlog.py's); MongoDB
runs on mongomock unless ``DELAYQ_TEST_MONGODB_URI`` names a server (mongomock counts
in Python: use a small ``--backlog``). Results go to
``benchmarks/results/metrics-gauges-<driver>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DELAY = 86400
BATCH = 5000
QUEUE = "gauged"
PROJECTS = ("bench-empty", "bench-backlog")


@contextlib.contextmanager
def store(driver: str, workdir: Path) -> Iterator[object]:
    """A configuration on a fresh store of *driver*, the store running meanwhile."""
    from delayq import conf as delayq_conf

    conf = delayq_conf.load([])
    conf.set_override("message_store", driver, group="drivers")
    conf.set_override("path", str(workdir / "delayq.sqlite"),
                      group="drivers:message_store:sqlite")
    conf.set_override("default_message_ttl", 2 * DELAY, group="transport")
    if driver == "redis":
        from benchmarks.backlog import RedisServer, free_port

        server = RedisServer(free_port(), workdir / "redis")
        server.start()
        try:
            group = "drivers:message_store:redis"
            conf.set_override("uri", f"redis://127.0.0.1:{server.port}", group=group)
            conf.set_override("reap_interval", 0, group=group)
            yield conf, None
        finally:
            server.stop()
        return
    if driver == "mongodb":
        from delayq.storage.mongo.driver import Driver as MongoDriver
        from tests.mongo_backend import MONGO

        real = MONGO.real_uri() is not None
        yield conf, MongoDriver(MONGO.real_client() if real else MONGO.mock_client(),
                                MONGO.new_database())
        return
    yield conf, None


def fill(driver, backlog: int) -> float:
    """Post *backlog* delayed messages through *driver*; the seconds it took."""
    from delayq.message import NewMessage

    started = time.perf_counter()
    for start in range(0, backlog, BATCH):
        count = min(BATCH, backlog - start)
        driver.messages.post(PROJECTS[1], QUEUE, str(uuid.uuid4()), [
            NewMessage(body={"n": start + i}, ttl=2 * DELAY, delay=DELAY)
            for i in range(count)])
        print(f"\rfilled {start + count}/{backlog}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return time.perf_counter() - started


def scrape_seconds(client, project: str) -> float:
    started = time.perf_counter()
    result = client.simulate_get("/metrics", query_string=f"project={project}")
    elapsed = time.perf_counter() - started
    assert result.status_code == 200, result.text
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", default="sqlite", choices=["sqlite", "redis", "mongodb"])
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()

    from falcon import testing

    from delayq.api.app import create_app
    from delayq.storage.registry import load_driver
    from delayq.synchronous import Synchronous

    with tempfile.TemporaryDirectory(prefix="delayq-bench-") as tmp, \
            store(args.driver, Path(tmp)) as (conf, driver):
        driver = driver or load_driver(conf)
        app = create_app(conf, driver=driver)
        client = testing.TestClient(app)
        headers = {"X-Project-ID": PROJECTS[0], "Client-ID": str(uuid.uuid4())}
        client.simulate_put(f"/v2/queues/{QUEUE}", headers=headers,
                            json={"_default_message_delay": 900})
        headers["X-Project-ID"] = PROJECTS[1]
        client.simulate_put(f"/v2/queues/{QUEUE}", headers=headers,
                            json={"_default_message_delay": 900})
        fill_seconds = fill(Synchronous(driver), args.backlog)
        # The gauges must see the backlog, or the comparison means nothing.
        text = client.simulate_get("/metrics", query_string=f"project={PROJECTS[1]}").text
        line = next(x for x in text.splitlines()
                    if x.startswith("delayq_queue_delayed_messages{"))
        assert float(line.rsplit(" ", 1)[1]) == args.backlog, line
        times: dict[str, list[float]] = {p: [] for p in PROJECTS}
        for _ in range(5):  # warm-up
            for project in PROJECTS:
                scrape_seconds(client, project)
        for _ in range(args.samples):
            for project in random.sample(PROJECTS, 2):
                times[project].append(scrape_seconds(client, project))

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {"median_ms": statistics.median(ordered) * 1000,
                "p90_ms": ordered[int(len(ordered) * 0.9) - 1] * 1000}

    result = {"driver": args.driver, "backlog": args.backlog, "samples": args.samples,
              "fill_seconds": round(fill_seconds, 1),
              "empty": summary(times[PROJECTS[0]]),
              "backlog_scrape": summary(times[PROJECTS[1]])}
    result["ratio"] = result["backlog_scrape"]["median_ms"] / result["empty"]["median_ms"]
    out = ROOT / "benchmarks" / "results" / f"metrics-gauges-{args.driver}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.driver}: backlog {args.backlog} delayed (filled in {fill_seconds:.0f} s)")
    print(f"  empty queue   median {result['empty']['median_ms']:.2f} ms  "
          f"p90 {result['empty']['p90_ms']:.2f} ms")
    print(f"  backlog queue median {result['backlog_scrape']['median_ms']:.2f} ms  "
          f"p90 {result['backlog_scrape']['p90_ms']:.2f} ms")
    print(f"  ratio {result['ratio']:.2f}")


if __name__ == "__main__":
    main()
