"""Filtered queue listings (``Broker.select_queues``), on every driver: Zaqar's ``name``
filter (a part of the name) and metadata filters (each key equal to its value), paged by
name, every page read from the driver's own listing."""

from __future__ import annotations

import pytest

from delayq import broker as broker_module
from delayq.queue import QueueFilter
from tests.contract.helpers import PROJECT, create

NAMES = ("billing", "orders", "orders.eu", "orders.us", "reports", "x-orders")


@pytest.fixture
def queues(broker):
    for name in NAMES:
        create(broker, name, region="eu" if name.endswith(".eu") else "us",
               tier=2 if "orders" in name else 1)
    create(broker, "flags", flag=True, tier=1.0)


def pages(broker, matching: QueueFilter, limit: int) -> list[list[str]]:
    """Every page of the listing, following its markers."""
    found, marker = [], None
    while True:
        page = broker.select_queues(PROJECT, marker, limit, matching)
        found.append([name for name, _ in page.queues])
        if page.next_marker is None:
            return found
        marker = page.next_marker


def test_name_shows_the_queues_whose_names_hold_it(broker, queues):
    assert pages(broker, QueueFilter(name="orders"), 2) == [
        ["orders", "orders.eu"], ["orders.us", "x-orders"], []]
    assert pages(broker, QueueFilter(name="s.e"), 10) == [["orders.eu"]]
    assert pages(broker, QueueFilter(name="nothing"), 10) == [[]]


def test_metadata_filters_match_every_key(broker, queues):
    us_orders = QueueFilter(metadata=(("region", "us"), ("tier", 2)))
    assert pages(broker, us_orders, 10) == [["orders", "orders.us", "x-orders"]]
    assert pages(broker, QueueFilter(name="orders", metadata=(("region", "eu"),)),
                 10) == [["orders.eu"]]
    # A number matches by value; a boolean is not the number 1; a string is no number.
    assert pages(broker, QueueFilter(metadata=(("tier", 1),)), 10) == [
        ["billing", "flags", "reports"]]
    assert pages(broker, QueueFilter(metadata=(("flag", 1),)), 10) == [[]]
    assert pages(broker, QueueFilter(metadata=(("tier", "2"),)), 10) == [[]]
    assert pages(broker, QueueFilter(metadata=(("missing", "us"),)), 10) == [[]]


def test_reserved_attributes_match_with_their_defaults(broker, queues):
    create(broker, "slow", _default_message_delay=30)
    delayed = QueueFilter(metadata=(("_default_message_delay", 30),))
    assert pages(broker, delayed, 10) == [["slow"]]
    normal = QueueFilter(metadata=(("_default_message_delay", 0),))
    assert pages(broker, normal, 10)[0] == sorted([*NAMES, "flags"])


def test_a_filtered_page_reads_a_bounded_number_of_queues(broker, monkeypatch):
    monkeypatch.setattr(broker_module, "FILTER_BATCH", 3)
    monkeypatch.setattr(broker_module, "FILTER_SCAN", 6)
    for n in range(10):
        create(broker, f"q{n}", keep=n in (8, 9))
    keep = QueueFilter(metadata=(("keep", "True"),))
    assert pages(broker, keep, 5) == [[], []]  # a string never matches a boolean
    kept = [name for name, metadata in broker.list_queues(PROJECT, None, 20)
            if metadata.get("keep")]
    assert kept == ["q8", "q9"]
    first = broker.select_queues(PROJECT, None, 5, QueueFilter(name="q"))
    assert [name for name, _ in first.queues] == ["q0", "q1", "q2", "q3", "q4"]
    # Six queues read and nothing found: an empty page, and the next marker after them.
    page = broker.select_queues(PROJECT, None, 5, QueueFilter(name="9"))
    assert (page.queues, page.next_marker) == ([], "q5")
    page = broker.select_queues(PROJECT, page.next_marker, 5, QueueFilter(name="9"))
    assert ([name for name, _ in page.queues], page.next_marker) == (["q9"], None)
