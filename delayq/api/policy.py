"""Who may do what: oslo.policy rules, with Zaqar's names and defaults.

Each route and method is one rule (``RULES``). The defaults are Zaqar's: anyone
authenticated in a project may do anything to that project's queues, messages and claims
(``""``), ``/v2/health`` needs the ``admin`` role, ``/v2/ping`` needs nothing. delayq's own
resources add ``queues:redrive`` and ``messages:update`` (the edit) with the same default
as their neighbours, and ``metrics:get`` for ``/metrics``, which can read any project's
counts, for ``admin`` only.

An operator overrides any rule in the file ``[oslo_policy] policy_file`` names (YAML or
JSON; read again when it changes); ``etc/policy.yaml.sample`` lists every rule with its
default. A rule checks the credentials (``role:...``, ``project_id:...``) and the
request's target (``target``): ``%(project_id)s``, the project acted in, and
``%(with_claim_id)s``, True when the request names a claim in its ``claim_id`` parameter
(a message deleted, or handed back, as part of the claim that holds it: the store
refuses a claim that does not hold the message), so a rule such as
``role:consumer and True:%(with_claim_id)s`` lets a consumer delete only the messages of
its claims.

The policy is enforced with ``auth_strategy = keystone``, on the roles of the token;
without authentication there is no identity to check, and nothing is enforced. A
pre-signed URL's requests are not checked against it: what a share grants is, when the
share is made (``rules_granted``, ``Policy.allowing_every_request``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oslo_config import cfg
from oslo_policy import policy

ADMIN = "role:admin"
UNPROTECTED = ""
ADMIN_OR_OWNER = "is_admin:True or project_id:%(project_id)s"
CONTEXT_IS_ADMIN = "context_is_admin"

QUEUES = "/v2/queues"
QUEUE = "/v2/queues/{name}"
MESSAGES = "/v2/queues/{name}/messages"
MESSAGE = "/v2/queues/{name}/messages/{message_id}"
CLAIMS = "/v2/queues/{name}/claims"
CLAIM = "/v2/queues/{name}/claims/{claim_id}"
STATS = "/v2/queues/{name}/stats"
PURGE = "/v2/queues/{name}/purge"
SHARE = "/v2/queues/{name}/share"
SUBSCRIPTIONS = "/v2/queues/{name}/subscriptions"
SUBSCRIPTION = "/v2/queues/{name}/subscriptions/{subscription_id}"
CONFIRM = "/v2/queues/{name}/subscriptions/{subscription_id}/confirm"
REDRIVE = "/v2/queues/{name}/redrive"
TOPICS = "/v2/topics"
TOPIC = "/v2/topics/{name}"
TOPIC_STATS = "/v2/topics/{name}/stats"
TOPIC_PURGE = "/v2/topics/{name}/purge"
TOPIC_MESSAGES = "/v2/topics/{name}/messages"
TOPIC_MESSAGE = "/v2/topics/{name}/messages/{message_id}"
TOPIC_SUBSCRIPTIONS = "/v2/topics/{name}/subscriptions"
TOPIC_SUBSCRIPTION = "/v2/topics/{name}/subscriptions/{subscription_id}"
TOPIC_CONFIRM = "/v2/topics/{name}/subscriptions/{subscription_id}/confirm"
PING = "/v2/ping"
HEALTH = "/v2/health"
METRICS = "/metrics"

# rule name -> (default, description, ((method, route template), ...))
_DEFINITIONS: dict[str, tuple[str, str, tuple[tuple[str, str], ...]]] = {
    "queues:get_all": (UNPROTECTED, "List the project's queues.", (("GET", QUEUES),)),
    "queues:create": (UNPROTECTED, "Create a queue.", (("PUT", QUEUE),)),
    "queues:get": (UNPROTECTED, "Read a queue's metadata, or whether it exists.",
                   (("GET", QUEUE), ("HEAD", QUEUE))),
    "queues:delete": (UNPROTECTED, "Delete a queue.", (("DELETE", QUEUE),)),
    "queues:update": (UNPROTECTED, "Change a queue's metadata (JSON patch).",
                      (("PATCH", QUEUE),)),
    "queues:stats": (UNPROTECTED, "Read a queue's statistics.", (("GET", STATS),)),
    "queues:share": (UNPROTECTED, "Create a pre-signed URL for a queue.",
                     (("POST", SHARE),)),
    "queues:purge": (UNPROTECTED, "Delete every message of a queue.", (("POST", PURGE),)),
    "queues:redrive": (UNPROTECTED, "Send a dead-letter queue's messages back (delayq).",
                       (("POST", REDRIVE),)),
    "topics:get_all": (UNPROTECTED, "List the project's topics.", (("GET", TOPICS),)),
    "topics:create": (UNPROTECTED, "Create a topic.", (("PUT", TOPIC),)),
    "topics:get": (UNPROTECTED, "Read a topic's metadata.", (("GET", TOPIC),)),
    "topics:delete": (UNPROTECTED, "Delete a topic.", (("DELETE", TOPIC),)),
    "topics:update": (UNPROTECTED, "Change a topic's metadata (JSON patch).",
                      (("PATCH", TOPIC),)),
    "topics:stats": (UNPROTECTED, "Read a topic's statistics.", (("GET", TOPIC_STATS),)),
    "topics:purge": (UNPROTECTED, "Delete a topic's messages or subscriptions.",
                     (("POST", TOPIC_PURGE),)),
    "messages:get_all": (UNPROTECTED, "List a queue's or topic's messages, or read "
                                      "several by id.",
                         (("GET", MESSAGES), ("GET", TOPIC_MESSAGES))),
    "messages:create": (UNPROTECTED, "Post messages to a queue, or publish them to a "
                                     "topic.",
                        (("POST", MESSAGES), ("POST", TOPIC_MESSAGES))),
    "messages:get": (UNPROTECTED, "Read one message.",
                     (("GET", MESSAGE), ("GET", TOPIC_MESSAGE))),
    "messages:update": (UNPROTECTED, "Edit an unclaimed message's body or delay, or hand "
                                     "a claimed one back with a delay (delayq).",
                        (("PATCH", MESSAGE),)),
    "messages:delete": (UNPROTECTED, "Delete one message. The target's with_claim_id is "
                                     "True when the request names the claim holding the "
                                     "message (claim_id).",
                        (("DELETE", MESSAGE), ("DELETE", TOPIC_MESSAGE))),
    "messages:delete_all": (UNPROTECTED, "Delete messages by id, or pop them.",
                            (("DELETE", MESSAGES), ("DELETE", TOPIC_MESSAGES))),
    "claims:create": (UNPROTECTED, "Claim messages.", (("POST", CLAIMS),)),
    "claims:get": (UNPROTECTED, "Read a claim.", (("GET", CLAIM),)),
    "claims:update": (UNPROTECTED, "Renew a claim.", (("PATCH", CLAIM),)),
    "claims:delete": (UNPROTECTED, "Release a claim.", (("DELETE", CLAIM),)),
    "subscription:create": (UNPROTECTED, "Subscribe a webhook to a queue or topic.",
                            (("POST", SUBSCRIPTIONS), ("POST", TOPIC_SUBSCRIPTIONS))),
    "subscription:get_all": (UNPROTECTED, "List a queue's or topic's subscriptions.",
                             (("GET", SUBSCRIPTIONS), ("GET", TOPIC_SUBSCRIPTIONS))),
    "subscription:get": (UNPROTECTED, "Read a subscription.",
                         (("GET", SUBSCRIPTION), ("GET", TOPIC_SUBSCRIPTION))),
    "subscription:update": (UNPROTECTED, "Change a subscription.",
                            (("PATCH", SUBSCRIPTION), ("PATCH", TOPIC_SUBSCRIPTION))),
    "subscription:delete": (UNPROTECTED, "Delete a subscription.",
                            (("DELETE", SUBSCRIPTION), ("DELETE", TOPIC_SUBSCRIPTION))),
    "subscription:confirm": (UNPROTECTED, "Confirm or unconfirm a subscription.",
                             (("PUT", CONFIRM), ("PUT", TOPIC_CONFIRM))),
    "ping:get": (UNPROTECTED, "Check that the service and its store answer.",
                 (("GET", PING), ("HEAD", PING))),
    "health:get": (ADMIN, "Read the service's health document.",
                   (("GET", HEALTH), ("HEAD", HEALTH))),
    "metrics:get": (ADMIN, "Scrape the Prometheus metrics, any project's counts included "
                           "(delayq).", (("GET", METRICS),)),
}

# (method, route template) -> rule name
RULES: dict[tuple[str, str], str] = {
    operation: name
    for name, (_, _, operations) in _DEFINITIONS.items() for operation in operations}


def target(project: str | None, *, with_claim_id: bool = False) -> dict[str, object]:
    """What a rule may check of the request besides the credentials (module doc)."""
    return {"project_id": project, "with_claim_id": with_claim_id}


def rules_granted(method: str, template: str) -> list[str]:
    """The rules of the requests a pre-signed URL for *method* on the route *template*
    lets through: the routes at *template* and below it (a signed path covers the paths
    below it), each with the rule the middleware checks for it."""
    below = template.rstrip("/") + "/"
    return [name for (verb, route), name in RULES.items()
            if verb == method and (route == template or route.startswith(below))]


def list_rules() -> list[policy.RuleDefault]:
    """Every rule with its default, for ``oslopolicy-sample-generator`` and the
    enforcer."""
    return [
        policy.RuleDefault(CONTEXT_IS_ADMIN, ADMIN,
                           description="Who counts as an administrator (is_admin:True)."),
        policy.RuleDefault("admin_or_owner", ADMIN_OR_OWNER,
                           description="An administrator, or a member of the project."),
        *(policy.DocumentedRuleDefault(
            name=name, check_str=default, description=description,
            operations=[{"method": method, "path": path} for method, path in operations])
          for name, (default, description, operations) in _DEFINITIONS.items()),
    ]


class Policy:
    """The rules in force: the defaults, overridden by the operator's policy file."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.enforcer = policy.Enforcer(conf)
        self.enforcer.register_defaults(list_rules())

    def allows(self, rule: str, credentials: Mapping[str, Any], project: str | None, *,
               with_claim_id: bool = False) -> bool:
        """Whether *credentials* (oslo.context's policy values) may act under *rule*
        on *project*'s resources, in a request naming a claim or not (``target``)."""
        # enforce writes into the credentials it is given ("system" from
        # "system_scope"), so it gets a copy, never the caller's mapping.
        credentials = {**credentials, "is_admin": self.enforcer.enforce(
            CONTEXT_IS_ADMIN, {}, dict(credentials))}
        return self.enforcer.enforce(
            rule, target(project, with_claim_id=with_claim_id), credentials)

    def allowing_every_request(self, rule: str, credentials: Mapping[str, Any],
                               project: str) -> bool:
        """Whether *credentials* may act under *rule* in *project* whatever else the
        request's target says (with a claim id and without): what sharing the rule's
        requests needs, since a pre-signed URL's holder may send either."""
        return all(self.allows(rule, credentials, project, with_claim_id=named)
                   for named in (False, True))


def get_enforcer() -> policy.Enforcer:
    """The enforcer ``oslopolicy-policy-generator`` and friends load (entry point
    ``oslo.policy.enforcer``), over delayq's options."""
    from delayq import conf as delayq_conf

    return Policy(delayq_conf.load()).enforcer
