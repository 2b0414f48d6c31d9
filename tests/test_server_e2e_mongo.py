"""End to end on the MongoDB driver: python-zaqarclient and httpx over loopback HTTP.

The scenarios are the SQLite end-to-end tests' own (imported below, so they run here
against this module's ``server``). Two servers serve them:

- ``mongomock``: the delayq app in uvicorn (the ASGI server delayq-server's workers run)
  on a thread of this process, over the MongoDB driver on mongomock — mongomock lives
  inside one process, so the server must too;
- ``delayq-server``: the real console script (gunicorn, two workers) configured with
  ``[drivers] message_store = mongodb``, against the server named by
  DELAYQ_TEST_MONGODB_URI (skipped without one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import uvicorn

from delayq import conf as delayq_conf
from delayq.api.app import create_app
from delayq.metrics import Metrics
from delayq.storage.mongo.driver import Driver as MongoDriver
from tests.mongo_backend import MONGO, URI_VARIABLE
from tests.server import delayq_server, free_port
from tests.test_server_e2e import (  # noqa: F401 - collected here, on this module's server
    MAX_MESSAGE_DELAY,
    assert_claimed_once_by_concurrent_consumers,
    assert_health_names,
    assert_ids_are_hex_and_malformed_ones_find_nothing,
    c,
    make_client,
    test_claim_get_update_release,
    test_dead_letter_policy_set_with_client_metadata,
    test_dead_letter_queue,
    test_delay_is_ignored_on_a_normal_queue,
    test_delayed_queue_end_to_end,
    test_home_document,
    test_messages_list_get_delete_pop,
    test_queue_listing_exists_and_delete,
)

pytestmark = pytest.mark.timeout(180)


@dataclass
class ThreadServer:
    """The app served by uvicorn on a thread of this process."""

    url: str


def serve_in_thread(app) -> Iterator[ThreadServer]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield ThreadServer(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(scope="module", params=["mongomock", "delayq-server"])
def server(request, tmp_path_factory):
    database = MONGO.new_database()
    if request.param == "mongomock":
        conf = delayq_conf.load([])
        conf.set_override("message_store", "mongodb", group="drivers")
        conf.set_override("max_message_delay", MAX_MESSAGE_DELAY, group="transport")
        metrics = Metrics()
        app = create_app(conf, driver=MongoDriver(MONGO.mock_client(), database,
                                                  endings=metrics.count_endings),
                         metrics=metrics)
        yield from serve_in_thread(app)
        return
    uri = MONGO.real_uri()
    if uri is None:
        pytest.skip(f"no real MongoDB for delayq-server: set {URI_VARIABLE} to run it")
    config = {"drivers:transport:wsgi": {"workers": 2},
              "transport": {"max_message_delay": MAX_MESSAGE_DELAY},
              "drivers": {"message_store": "mongodb"},
              "drivers:message_store:mongodb": {"uri": uri, "database": database}}
    with delayq_server(tmp_path_factory.mktemp("e2e-mongo"), config=config) as running:
        yield running


def test_health_names_the_mongodb_store(server):
    assert_health_names(server.url, "mongodb")


def test_message_ids_are_object_ids(server):
    assert_ids_are_hex_and_malformed_ones_find_nothing(server.url, 24)


def test_concurrent_consumers_each_message_once(server):
    assert_claimed_once_by_concurrent_consumers(server.url)
