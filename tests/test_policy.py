"""The policy rules: Zaqar's names and defaults, the example file in etc/, reloading, and
the generated sample (etc/policy.yaml.sample) kept current."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import falcon.inspect
import pytest
import yaml

from delayq.api import policy
from delayq.api.app import create_app
from tests.apps import sqlite_conf

ROOT = Path(__file__).resolve().parent.parent
GENERATOR_CONFIG = ROOT / "etc" / "delayq-policy-generator.conf"
SAMPLE = ROOT / "etc" / "policy.yaml.sample"
EXAMPLE = ROOT / "etc" / "policy.producer-consumer.yaml"
REGENERATE = "oslopolicy-sample-generator --config-file etc/delayq-policy-generator.conf"

ZAQAR_RULES = {
    "queues:get_all", "queues:create", "queues:get", "queues:delete", "queues:update",
    "queues:stats", "queues:share", "queues:purge", "messages:get_all",
    "messages:create", "messages:get", "messages:delete", "messages:delete_all",
    "claims:create", "claims:get", "claims:delete", "claims:update", "ping:get",
    "health:get", "subscription:create", "subscription:get_all", "subscription:get",
    "subscription:update", "subscription:delete",
}


def credentials(*roles: str, project: str = "p1") -> dict[str, object]:
    return {"roles": list(roles), "project_id": project, "user_id": "u1"}


@pytest.fixture
def rules(tmp_path):
    def make(policy_file: Path | None = None) -> policy.Policy:
        conf = sqlite_conf(tmp_path)
        if policy_file is not None:
            conf.set_override("policy_file", str(policy_file), group="oslo_policy")
        return policy.Policy(conf)
    return make


def test_every_route_and_method_the_app_serves_has_a_rule(tmp_path):
    names = {rule.name for rule in policy.list_rules()}
    assert names >= ZAQAR_RULES
    assert {"queues:redrive", "messages:update", "metrics:get"} <= names
    served = {(method.method, route.path)
              for route in falcon.inspect.inspect_routes(create_app(sqlite_conf(tmp_path)))
              for method in route.methods if not method.internal}
    # The home and versions documents have no rule, as in Zaqar: any authenticated
    # caller reads them. Nor has the WebSocket route: each of its frames is the HTTP
    # request of its action, held to that request's rule (delayq.websocket).
    served = {(method, path) for method, path in served if method != "WEBSOCKET"}
    assert served - {("GET", "/v2"), ("GET", "/")} == set(policy.RULES)


def test_defaults_are_zaqars(rules):
    enforced = rules()
    anyone = credentials("member")
    for name in ZAQAR_RULES - {"health:get"}:
        assert enforced.allows(name, anyone, "p1"), name
    assert not enforced.allows("health:get", anyone, "p1")
    assert enforced.allows("health:get", credentials("admin"), "p1")
    assert not enforced.allows("metrics:get", anyone, None)
    assert enforced.allows("ping:get", policy_anonymous(), None)


def policy_anonymous() -> dict[str, object]:
    from delayq.api.auth import ANONYMOUS

    return dict(ANONYMOUS)


def test_the_example_file_splits_producers_and_consumers(rules):
    enforced = rules(EXAMPLE)
    producer, consumer, reader, member = (credentials("producer"), credentials("consumer"),
                                          credentials("reader"), credentials("member"))
    assert enforced.allows("messages:create", producer, "p1")
    for name in ("claims:create", "messages:get_all", "messages:delete", "queues:stats"):
        assert not enforced.allows(name, producer, "p1"), name
        assert not enforced.allows(name, producer, "p1", with_claim_id=True), name
    for name in ("claims:create", "claims:update", "claims:delete"):
        assert enforced.allows(name, consumer, "p1"), name
    # A consumer deletes a message only as part of a claim (claim_id in the request).
    assert enforced.allows("messages:delete", consumer, "p1", with_claim_id=True)
    assert not enforced.allows("messages:delete", consumer, "p1")
    assert not enforced.allowing_every_request("messages:delete", consumer, "p1")
    for name in ("messages:create", "messages:delete_all", "queues:purge"):
        assert not enforced.allows(name, consumer, "p1"), name
    for name in ("queues:get_all", "queues:stats", "messages:get_all", "messages:get"):
        assert enforced.allows(name, reader, "p1"), name
    for name in ("messages:create", "messages:delete", "claims:create", "queues:purge",
                 "subscription:create", "subscription:get_all"):
        assert not enforced.allows(name, reader, "p1", with_claim_id=True), name
    for name in yaml.safe_load(EXAMPLE.read_text()):
        if not name.startswith("project_"):
            for who in (member, credentials("admin")):
                assert enforced.allowing_every_request(name, who, "p1"), name


def test_a_share_grants_the_rules_of_its_routes_and_those_below(tmp_path):
    """Each (method, path) a share may sign maps to the rules of the routes the signed
    path covers, the same rules the middleware checks; none is left unmapped."""
    assert policy.rules_granted("GET", policy.MESSAGES) == ["messages:get_all",
                                                            "messages:get"]
    assert sorted(policy.rules_granted("DELETE", policy.MESSAGES)) == [
        "messages:delete", "messages:delete_all"]
    assert policy.rules_granted("POST", policy.SUBSCRIPTIONS) == ["subscription:create"]
    assert policy.rules_granted("PATCH", policy.CLAIMS) == ["claims:update"]
    assert policy.rules_granted("PUT", policy.MESSAGES) == []
    # A path that only starts like the signed one is not below it.
    assert policy.rules_granted("GET", "/v2/queues/{name}/message") == []
    served = {(method.method, route.path)
              for route in falcon.inspect.inspect_routes(create_app(sqlite_conf(tmp_path)))
              for method in route.methods if not method.internal}
    for path in ("messages", "claims", "subscriptions"):
        template = f"{policy.QUEUE}/{path}"
        for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
            covered = {(verb, route) for verb, route in served if verb == method
                       and (route == template or route.startswith(template + "/"))}
            assert {policy.RULES[c] for c in covered} == set(
                policy.rules_granted(method, template)), (method, path)


def test_a_changed_policy_file_takes_effect_without_a_restart(rules, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text('"messages:create": "role:producer"\n')
    enforced = rules(path)
    assert not enforced.allows("messages:create", credentials("member"), "p1")
    path.write_text('"messages:create": "role:member"\n')
    later = time.time() + 5  # oslo.policy notices a change by the file's mtime
    os.utime(path, (later, later))
    assert enforced.allows("messages:create", credentials("member"), "p1")


def test_policy_sample_is_current(tmp_path):
    generator = Path(sys.executable).parent / "oslopolicy-sample-generator"
    fresh = tmp_path / "policy.yaml.sample"
    subprocess.run([str(generator), "--config-file", str(GENERATOR_CONFIG),
                    "--output-file", str(fresh)], cwd=ROOT, check=True)
    assert fresh.read_text() == SAMPLE.read_text(), (
        "etc/policy.yaml.sample is stale: the rules in delayq/api/policy.py changed. "
        f"Regenerate it from the repository root with `{REGENERATE}` and commit it.")
