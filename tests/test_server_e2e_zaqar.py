"""End to end with python-zaqarclient, as a user moving from Zaqar works: the real
``delayq-server`` with ``client_id_uuid_safe = off`` (a Client-ID that is no UUID),
dotted queue names (a dotted dead-letter queue too), and queue listings filtered by
name and metadata, counted, and streamed page after page with the client's own
iterator."""

from __future__ import annotations

import time
import uuid

import pytest
from zaqarclient.queues import client as zaqar
from zaqarclient.queues.v2 import core

from tests.server import delayq_server

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("e2e-zaqar")
    config = {"drivers:transport:wsgi": {"workers": 1},
              "transport": {"client_id_uuid_safe": "off"}}
    with delayq_server(cwd, config=config) as running:
        yield running


def client_named(url: str, client_id: str, project: str) -> zaqar.Client:
    return zaqar.Client(url, version=2, conf={
        "client_uuid": client_id,
        "auth_opts": {"backend": "noauth", "options": {"os_project_id": project}}})


@pytest.fixture
def project() -> str:
    return f"zaqar-{uuid.uuid4().hex[:8]}"


def call(client: zaqar.Client, operation, *args, **kwargs):
    """One of python-zaqarclient's ``core`` operations, on a fresh request of *client*.

    Dotted names go through these: the client's ``Queue`` objects refuse them (its own
    name pattern has no dot), and so does its listing iterator, which makes one of each.
    """
    request, transport = client._request_and_transport()
    return operation(transport, request, *args, **kwargs)


def test_dotted_queues_and_a_client_id_that_is_no_uuid(server, project):
    producer = client_named(server.url, "billing.producer-1", project)
    consumer = client_named(server.url, "billing.consumer-1", project)
    call(producer, core.queue_create, "orders.eu",
         metadata={"_max_claim_count": 1, "_dead_letter_queue": "orders.eu.dlq"})
    assert call(producer, core.queue_get, "orders.eu")["_dead_letter_queue"] == (
        "orders.eu.dlq")
    posted = call(producer, core.message_post, "orders.eu",
                  [{"body": {"order": 1}}, {"body": {"order": 2}}])
    assert all(h.startswith("/v2/queues/orders.eu/messages/") for h in posted["resources"])

    def bodies(client, queue, **params):
        listing = call(client, core.message_list, queue, **params)
        return sorted(m["body"]["order"] for m in listing["messages"])

    assert bodies(producer, "orders.eu", echo=False) == []  # its own, left out
    assert bodies(consumer, "orders.eu", echo=False) == [1, 2]

    claimed = call(consumer, core.claim_create, "orders.eu", ttl=60, grace=60, limit=10)
    [first, second] = claimed["messages"]
    claim_id = first["claim_id"]
    call(consumer, core.message_delete, "orders.eu", first["id"], claim_id=claim_id)
    call(consumer, core.claim_delete, "orders.eu", claim_id)  # second: claimed once, freed
    assert call(consumer, core.claim_create, "orders.eu", ttl=60, grace=60) is None

    dead = call(consumer, core.message_list, "orders.eu.dlq", echo=True)["messages"]
    assert [m["body"] for m in dead] == [second["body"]]
    assert call(consumer, core.queue_get_stats, "orders.eu.dlq")["messages"]["total"] == 1
    assert call(consumer, core.queue_get_stats, "orders.eu")["messages"]["total"] == 0
    listed = call(consumer, core.queue_list, name="orders.eu", with_count=True)
    assert [q["name"] for q in listed["queues"]] == ["orders.eu", "orders.eu.dlq"]
    assert listed["count"] == 2


def test_listing_filtered_counted_and_streamed(server, project):
    c = client_named(server.url, "lister-0001", project)
    names = [f"shop-{region}-{n}" for region in ("eu", "us") for n in range(3)]
    for name in names:
        c.queue(name, force_create=True).metadata(
            new_meta={"region": name.split("-")[1], "tier": int(name[-1])})
    c.queue("reports", force_create=True)

    queues, count = c.queues(name="shop-eu", limit=2, with_count=True)
    assert count == 7  # Zaqar counts every queue of the project
    assert [q.name for q in queues.stream()] == names[:3]  # follows the next links

    queues, _ = c.queues(region="us", tier=2, detailed=True)
    [found] = list(queues)
    assert found.name == "shop-us-2"
    assert (found.metadata()["region"], found.metadata()["tier"]) == ("us", 2)

    queues, count = c.queues(name="shop", tier=0, limit=1)
    assert count is None  # not asked for
    assert [q.name for q in queues.stream()] == ["shop-eu-0", "shop-us-0"]

    started = time.monotonic()
    assert list(c.queues(name="nowhere")[0]) == []
    assert time.monotonic() - started < 5


def test_a_keyed_post_through_the_client_is_stored_once(server, project):
    c = client_named(server.url, "keyed.producer-1", project)

    def keyed_post(key: str, order: int):
        request, transport = c._request_and_transport()
        request.headers["Idempotency-Key"] = key
        return core.message_post(transport, request, "orders.eu",
                                 [{"body": {"order": order}}])

    first = keyed_post("order-4711", 4711)
    assert keyed_post("order-4711", 4711) == first
    # The client raises for the statuses it knows; a 422 it hands back as the answer.
    assert keyed_post("order-4711", 4712)["title"] == "Idempotency key reused"
    assert call(c, core.queue_get_stats, "orders.eu")["messages"]["total"] == 1
