"""docs/openapi.yaml: a valid OpenAPI document, and the real server answers as it says.

schemathesis generates requests from the document — valid ones and, in its negative
mode and coverage phase, ones that break it — and sends them to ``delayq-server`` on
SQLite over loopback HTTP. Every response must be no 5xx, with a status, a Content-Type,
headers and a body the document gives for that operation.

Random names and ids would only ever meet an empty store, so most requests are steered
at a known state instead: before each operation's run a fresh project gets a plain queue,
a delayed queue and a dead-letter pair with messages, a live claim, dead-lettered
messages and a subscription, and topics with published messages and a subscription
(``seed``); path parameters, ``ids``, ``claim_id`` and the project header point at them
(a topic path's at the topics') three times out of four.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from delayq.api.queues import JSON_PATCH
from tests.server import RunningServer, delayq_server

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "openapi.yaml"
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
# Generated examples per operation, beyond the document's own examples and schemathesis's
# coverage cases (boundaries, each constraint broken once): enough to vary bodies and
# parameters, few enough that the whole run stays well under a minute on a slow machine.
# DELAYQ_OPENAPI_EXAMPLES=200 fuzzes longer.
MAX_EXAMPLES = int(os.environ.get("DELAYQ_OPENAPI_EXAMPLES", "8"))

# A queue PATCH body is JSON under Zaqar's own media type, and so is the home document;
# schemathesis knows neither by name.
schemathesis.serializer.alias(JSON_PATCH, "application/json")


@schemathesis.deserializer("application/json-home")
def json_home(ctx: Any, response: Any) -> Any:
    return json.loads(response.content)


schema = schemathesis.openapi.from_path(DOCUMENT)
schema.config.generation.update(max_examples=MAX_EXAMPLES, deterministic=True,
                                database="none")


def test_the_document_is_valid_openapi() -> None:
    document, _ = read_from_filename(str(DOCUMENT))
    validate(document)


@dataclass
class Seeded:
    """The known state of one operation's run: a project and what it holds."""

    project: str = ""
    client: str = ""
    queues: list[str] = field(default_factory=list)
    #: (queue, message id) of messages in every state: free, delayed, claimed, moved.
    messages: list[tuple[str, str]] = field(default_factory=list)
    #: (queue, claim id) of live claims.
    claims: list[tuple[str, str]] = field(default_factory=list)
    #: (queue, subscription id) of subscriptions.
    subscriptions: list[tuple[str, str]] = field(default_factory=list)
    #: The same of topics: names, (topic, message id), (topic, subscription id).
    topics: list[str] = field(default_factory=list)
    topic_messages: list[tuple[str, str]] = field(default_factory=list)
    topic_subscriptions: list[tuple[str, str]] = field(default_factory=list)

    def of(self, path: str) -> Seeded:
        """The queues' state, or the topics' (as queues) for a topic path."""
        if not path.startswith("/v2/topics"):
            return self
        return Seeded(project=self.project, client=self.client, queues=self.topics,
                      messages=self.topic_messages,
                      subscriptions=self.topic_subscriptions)


STATE = Seeded()
PROJECTS = itertools.count()


def seed(url: str) -> Seeded:
    """A fresh project with queues, messages, a claim, dead-lettered messages and
    topics."""
    state = Seeded(project=f"fuzz-{next(PROJECTS)}", client=str(uuid.uuid4()))
    headers = {"X-Project-ID": state.project, "Client-ID": state.client}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        def ok(response: httpx.Response) -> httpx.Response:
            assert response.status_code < 300, response.text
            return response

        ok(http.put("/v2/queues/plain", json={"description": "fuzzed"}))
        ok(http.put("/v2/queues/delayed", json={"_default_message_delay": 600}))
        ok(http.put("/v2/queues/source", json={"_max_claim_count": 1,
                                               "_dead_letter_queue": "dlq"}))
        for queue in ("plain", "delayed", "source"):
            posted = ok(http.post(f"/v2/queues/{queue}/messages", json={"messages": [
                {"body": {"n": n}, "ttl": 3600} for n in range(4)]})).json()
            state.messages += [(queue, href.rsplit("/", 1)[1])
                               for href in posted["resources"]]
        # Two claims of the source queue: the first counts each message once, the second
        # moves them all to the dead-letter queue (created by the move).
        first = ok(http.post("/v2/queues/source/claims", json={"ttl": 60, "grace": 60}))
        ok(http.delete(first.headers["Location"]))
        assert http.post("/v2/queues/source/claims").status_code == 204
        held = ok(http.post("/v2/queues/plain/claims?limit=2", json={"ttl": 600}))
        state.claims.append(("plain", held.headers["Location"].rsplit("/", 1)[1]))
        subscribed = ok(http.post("/v2/queues/plain/subscriptions",
                                  json={"subscriber": "http://127.0.0.1:9/hook"}))
        state.subscriptions.append(("plain", subscribed.json()["subscription_id"]))
        state.queues = ["plain", "delayed", "source", "dlq"]
        # A topic with a subscriber and published messages, and an empty one.
        ok(http.put("/v2/topics/quiet", json={"description": "fuzzed"}))
        subscribed = ok(http.post("/v2/topics/news/subscriptions",
                                  json={"subscriber": "http://127.0.0.1:9/hook"}))
        state.topic_subscriptions.append(("news", subscribed.json()["subscription_id"]))
        posted = ok(http.post("/v2/topics/news/messages", json={"messages": [
            {"body": {"n": n}, "ttl": 3600} for n in range(4)]})).json()
        state.topic_messages += [("news", href.rsplit("/", 1)[1])
                                 for href in posted["resources"]]
        state.topics = ["news", "quiet"]
    return state


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RunningServer]:
    with delayq_server(tmp_path_factory.mktemp("openapi"),
                       # Generated subscribers are anybody's URLs: nothing is pushed.
                       # Every address is allowed, so that none is resolved: a name's
                       # lookup would make the answer depend on this machine's DNS
                       # (tests/test_webhook_targets.py checks where subscribers may be).
                       config={"drivers:transport:wsgi": {"workers": 1},
                               "notification": {"push": "false",
                                                "allowed_webhook_networks": "0.0.0.0/0, ::/0"}}
                       ) as running:
        yield running


@pytest.fixture
def seeded(server: RunningServer) -> Iterator[RunningServer]:
    """The server, with a fresh known state in STATE for the hooks to steer at."""
    global STATE
    STATE = seed(server.url)
    yield server


def mostly(known: st.SearchStrategy, generated: Any) -> st.SearchStrategy:
    """*known* three times out of four, else the *generated* value."""
    return st.integers(0, 3).flatmap(lambda n: st.just(generated) if n == 0 else known)


# The hooks see each generated value (plain, also in negative mode) and may swap it for
# one naming the known state; ``st.deferred`` reads STATE when drawing, once seeded.


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None
                            ) -> st.SearchStrategy:
    path = context.operation.path
    if path.endswith("{message_id}"):
        known = st.deferred(lambda: st.sampled_from(STATE.of(path).messages).map(
            lambda pair: {"name": pair[0], "message_id": pair[1]}))
    elif path.endswith("{claim_id}"):
        known = st.deferred(lambda: st.sampled_from(STATE.claims).map(
            lambda pair: {"name": pair[0], "claim_id": pair[1]}))
    elif path.endswith(("{subscription_id}", "{subscription_id}/confirm")):
        known = st.deferred(lambda: st.sampled_from(STATE.of(path).subscriptions).map(
            lambda pair: {"name": pair[0], "subscription_id": pair[1]}))
    elif "{name}" in path:
        known = st.deferred(lambda: st.sampled_from(STATE.of(path).queues).map(
            lambda name: {"name": name}))
    else:
        return st.just(path_parameters)
    return mostly(known, path_parameters)


@schema.hook
def flatmap_headers(context: Any, headers: dict[str, Any] | None) -> st.SearchStrategy:
    known = dict(headers or {})
    known["X-Project-ID"] = STATE.project
    if any(p.name == "Client-ID" for p in context.operation.headers):
        known["Client-ID"] = STATE.client
    return mostly(st.just(known), headers)


@schema.hook
def flatmap_query(context: Any, query: dict[str, Any] | None) -> st.SearchStrategy:
    query = without_long_waits(query)
    names = {parameter.name for parameter in context.operation.query}
    choices = []
    if "ids" in names and query and "ids" in query:
        messages = STATE.of(context.operation.path).messages
        choices.append(st.lists(st.sampled_from([m for _, m in messages]),
                                min_size=1, max_size=3).map(lambda ids: {"ids": ids}))
    if "claim_id" in names:
        choices.append(st.sampled_from([c for _, c in STATE.claims]).map(
            lambda claim_id: {"claim_id": claim_id}))
    if not choices:
        return st.just(query)
    return mostly(st.one_of(*choices).map(lambda extra: {**(query or {}), **extra}), query)


def without_long_waits(query: dict[str, Any] | None) -> dict[str, Any] | None:
    """A long-poll claim on an empty queue waits its full ``wait``: valid waits become 0
    so the run stays short (tests/test_long_poll.py covers waiting); invalid ones go."""
    wait = (query or {}).get("wait")
    if isinstance(wait, int) and not isinstance(wait, bool) and 0 < wait <= 20:
        return {**query, "wait": 0}
    return query


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_the_server_answers_as_the_document_says(case: Any, seeded: RunningServer) -> None:
    case.call_and_validate(base_url=seeded.url, checks=CHECKS, timeout=30)
