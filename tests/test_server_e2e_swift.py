"""End to end on the Swift driver: the real ``delayq-server`` (gunicorn, two workers)
configured with ``[drivers] message_store = swift`` against the test Swift
(tests/swift_server.py), driven by python-zaqarclient and httpx over loopback HTTP.

The scenarios are the SQLite end-to-end tests' own (imported below, so they run here
against this module's ``server``); the server keeps its containers under a prefix of its
own.
"""

from __future__ import annotations

import uuid

import pytest

from tests.server import delayq_server
from tests.swift_server import SWIFT
from tests.test_server_e2e import (  # noqa: F401 - collected here, on this module's server
    MAX_MESSAGE_DELAY,
    assert_claimed_once_by_concurrent_consumers,
    assert_health_names,
    assert_ids_are_hex_and_malformed_ones_find_nothing,
    c,
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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    auth = SWIFT.auth()
    config = {"drivers:transport:wsgi": {"workers": 2},
              "transport": {"max_message_delay": MAX_MESSAGE_DELAY},
              "drivers": {"message_store": "swift"},
              "drivers:message_store:swift": {
                  "auth_url": auth.auth_url, "user": auth.user, "key": auth.key,
                  "container_prefix": f"e2e{uuid.uuid4().hex[:12]}"}}
    with delayq_server(tmp_path_factory.mktemp("e2e-swift"), config=config) as running:
        yield running


def test_health_names_the_swift_store(server):
    assert_health_names(server.url, "swift")


def test_a_malformed_message_id_finds_nothing(server):
    assert_ids_are_hex_and_malformed_ones_find_nothing(server.url, 30)


def test_concurrent_consumers_each_message_once(server):
    assert_claimed_once_by_concurrent_consumers(server.url)
