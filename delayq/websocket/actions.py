"""Zaqar's WebSocket actions, each as the HTTP request of the v2 API that serves it.

``ACTIONS`` is the one table of action names. Each ``Action`` says how a frame's body
becomes an HTTP request (method, path with the body's names in it, query parameters,
JSON content) and how the HTTP answer becomes the frame's body, in the shape Zaqar's
WebSocket endpoints (``zaqar.api.v2.endpoints``) give it. Errors are not shaped here:
``endpoint`` maps every error answer to Zaqar's error body in one place.

Zaqar's own actions come first; ``ping_node``, ``check_node_health`` and
``get_home_doc`` are in Zaqar's schema; the ``topic_*`` actions are delayq's, for its
topics, named after the queue actions.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from delayq import jsontext
from delayq.websocket.frames import SCHEMA_FAILED

JSON = "application/json"
JSON_PATCH = "application/openstack-messaging-v2.0-json-patch"

# Zaqar's action names that behave differently from a plain HTTP call.
AUTHENTICATE = "authenticate"
SUBSCRIPTION_CREATE = "subscription_create"
TOPIC_SUBSCRIPTION_CREATE = "topic_subscription_create"
# The action creating a subscription, and the one deleting it with the body naming it.
SUBSCRIPTION_DELETE = {SUBSCRIPTION_CREATE: ("subscription_delete", "queue_name"),
                       TOPIC_SUBSCRIPTION_CREATE: ("topic_subscription_delete",
                                                   "topic_name")}

Answer = Callable[[Mapping[str, Any], Any, str | None], Any]
Content = Callable[[Mapping[str, Any]], Any]


class FrameInvalid(Exception):
    """A frame's body that cannot make the action's request: 400, Zaqar's
    ``Schema validation failed.``, with what is wrong."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.message = SCHEMA_FAILED
        self.detail = detail


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query_string: bytes
    content: bytes
    content_type: str


def as_is(body: Mapping[str, Any], answer: Any, location: str | None) -> Any:
    return answer if answer is not None else {}


def no_content(body: Mapping[str, Any]) -> Any:
    return None


def picked(*names: str) -> Content:
    """The content ``{name: body[name]}`` of the names the body has."""
    def content(body: Mapping[str, Any]) -> Any:
        return {name: body[name] for name in names if name in body}
    return content


def said(template: str) -> Answer:
    """Zaqar's sentence for an action done (``"Queue q1 created."``), from the body."""
    def answer(body: Mapping[str, Any], content: Any, location: str | None) -> Any:
        return template.format_map(body)
    return answer


def last_segment(location: str | None) -> str | None:
    return location.rsplit("/", 1)[-1].split("?", 1)[0] if location else None


def posted_ids(body: Mapping[str, Any], answer: Any, location: str | None) -> Any:
    """Zaqar's ``{"message_ids"}`` from HTTP's ``{"resources": [hrefs]}``."""
    return {"message_ids": [href.rsplit("/", 1)[-1] for href in answer["resources"]]}


def one_message(body: Mapping[str, Any], answer: Any, location: str | None) -> Any:
    return {"messages": answer}


def claimed(body: Mapping[str, Any], answer: Any, location: str | None) -> Any:
    """Zaqar's ``{"claim_id", "messages"}``; ``{}`` when nothing was claimed (204)."""
    if answer is None:
        return {}
    return {"claim_id": last_segment(location), **answer}


def subscribed(body: Mapping[str, Any], answer: Any, location: str | None) -> Any:
    return {**answer, "message": "Subscription {queue_name} created.".format_map(body)}


@dataclass(frozen=True)
class Action:
    """How one action is served: *path* names body members in braces; *query* maps
    body members to query parameters; *content* makes the JSON content from the body;
    *answer* makes the frame's body from a successful answer's JSON (None when it has
    none) and its Location."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    content: Content = no_content
    content_type: str = JSON
    answer: Answer = as_is


LISTING = {"marker": "marker", "limit": "limit"}
QUEUE = "/v2/queues/{queue_name}"
MESSAGES = QUEUE + "/messages"
CLAIMS = QUEUE + "/claims"
SUBSCRIPTIONS = QUEUE + "/subscriptions"
TOPIC = "/v2/topics/{topic_name}"

ACTIONS: Mapping[str, Action] = {
    # Queues
    "queue_list": Action("GET", "/v2/queues", query={
        **LISTING, "detailed": "detailed", "with_count": "with_count", "name": "name"}),
    "queue_create": Action("PUT", QUEUE, content=lambda body: body.get("metadata", {}),
                           answer=said("Queue {queue_name} created.")),
    "queue_get": Action("GET", QUEUE),
    "queue_update": Action("PATCH", QUEUE, content=lambda body: body.get("metadata"),
                           content_type=JSON_PATCH),
    "queue_delete": Action("DELETE", QUEUE, answer=said("Queue {queue_name} removed.")),
    "queue_get_stats": Action("GET", QUEUE + "/stats"),
    "queue_purge": Action("POST", QUEUE + "/purge", content=picked("resource_types")),
    # Messages
    "message_list": Action("GET", MESSAGES, query={
        **LISTING, "echo": "echo", "include_claimed": "include_claimed",
        "include_delayed": "include_delayed"}),
    "message_get": Action("GET", MESSAGES + "/{message_id}", answer=one_message),
    "message_get_many": Action("GET", MESSAGES, query={"message_ids": "ids"}),
    "message_post": Action("POST", MESSAGES, content=picked("messages"), answer=posted_ids),
    "message_delete": Action("DELETE", MESSAGES + "/{message_id}",
                             query={"claim_id": "claim_id"}),
    "message_delete_many": Action("DELETE", MESSAGES, query={
        "message_ids": "ids", "claim_ids": "claim_ids", "pop": "pop"}),
    # Claims
    "claim_create": Action("POST", CLAIMS, query={"limit": "limit"},
                           content=picked("ttl", "grace"), answer=claimed),
    "claim_get": Action("GET", CLAIMS + "/{claim_id}"),
    "claim_update": Action("PATCH", CLAIMS + "/{claim_id}", content=picked("ttl", "grace"),
                           answer=said("Claim {claim_id} updated.")),
    "claim_delete": Action("DELETE", CLAIMS + "/{claim_id}",
                           answer=said("Claim {claim_id} deleted.")),
    # Subscriptions
    "subscription_list": Action("GET", SUBSCRIPTIONS, query=LISTING),
    SUBSCRIPTION_CREATE: Action("POST", SUBSCRIPTIONS,
                                content=picked("subscriber", "ttl", "options"),
                                answer=subscribed),
    "subscription_get": Action("GET", SUBSCRIPTIONS + "/{subscription_id}"),
    "subscription_delete": Action("DELETE", SUBSCRIPTIONS + "/{subscription_id}",
                                  answer=said("Subscription {subscription_id} removed.")),
    # The service
    "ping_node": Action("GET", "/v2/ping"),
    "check_node_health": Action("GET", "/v2/health"),
    "get_home_doc": Action("GET", "/v2"),
    # Topics (delayq)
    "topic_list": Action("GET", "/v2/topics", query={**LISTING, "detailed": "detailed"}),
    "topic_create": Action("PUT", TOPIC, content=lambda body: body.get("metadata", {}),
                           answer=said("Topic {topic_name} created.")),
    "topic_get": Action("GET", TOPIC),
    "topic_delete": Action("DELETE", TOPIC, answer=said("Topic {topic_name} removed.")),
    "topic_get_stats": Action("GET", TOPIC + "/stats"),
    "topic_purge": Action("POST", TOPIC + "/purge", content=picked("resource_types")),
    "topic_message_post": Action("POST", TOPIC + "/messages", content=picked("messages"),
                                 answer=posted_ids),
    "topic_message_list": Action("GET", TOPIC + "/messages", query={
        **LISTING, "echo": "echo", "include_delayed": "include_delayed"}),
    "topic_message_get": Action("GET", TOPIC + "/messages/{message_id}",
                                answer=one_message),
    "topic_subscription_create": Action(
        "POST", TOPIC + "/subscriptions", content=picked("subscriber", "ttl", "options"),
        answer=lambda body, answer, location: {
            **answer, "message": "Subscription {topic_name} created.".format_map(body)}),
    "topic_subscription_list": Action("GET", TOPIC + "/subscriptions", query=LISTING),
    "topic_subscription_get": Action("GET", TOPIC + "/subscriptions/{subscription_id}"),
    "topic_subscription_delete": Action(
        "DELETE", TOPIC + "/subscriptions/{subscription_id}",
        answer=said("Subscription {subscription_id} removed.")),
}


def not_an_action(name: object) -> str:
    """Zaqar's answer to an unknown action (400)."""
    return f"{name} is not a valid action"


def http_request(action: Action, body: Any) -> HttpRequest:
    """The HTTP request *action* is for the frame's *body*; raises FrameInvalid."""
    if not isinstance(body, dict):
        raise FrameInvalid("The body of a request frame must be an object.")
    path = action.path.format_map(_PathNames(body))
    query = urllib.parse.urlencode(
        [(parameter, _query_value(name, body[name]))
         for name, parameter in action.query.items() if body.get(name) is not None])
    content = action.content(body)
    return HttpRequest(action.method, path, query.encode(),
                       b"" if content is None else jsontext.dumps(content).encode(),
                       action.content_type)


class _PathNames(dict):
    """The body's members a path names, each checked to be one path segment: a name
    holding a slash would route the request elsewhere."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        super().__init__()
        self.body = body

    def __missing__(self, name: str) -> str:
        value = self.body.get(name)
        if not isinstance(value, str) or not value:
            raise FrameInvalid(f"The body must name the {name} (a string).")
        if "/" in value or value in (".", ".."):
            raise FrameInvalid(f"{name} may not hold a slash.")
        return value


def _query_value(name: str, value: Any) -> str:
    """A body member as Zaqar's HTTP API takes it in the query: a list comma-joined, a
    boolean in lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return ",".join(value)
    raise FrameInvalid(f"{name} must be a string, a number, a boolean or a list of "
                       f"strings.")
