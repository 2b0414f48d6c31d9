"""Where webhooks may be: a subscriber at a loopback, private, link-local or otherwise
non-public address — written as such, in any numeric form getaddrinfo takes, or behind
a name — is refused when a subscription is created or changed (400), unless the
operator allows its network (``[notification] allowed_webhook_networks``); and a push
to such an address is refused at delivery, as a failed attempt, whatever the
subscription was accepted under.

The subscription checks run on the in-process app (SQLite: the check comes before the
store). Delivery runs on the real ``delayq-server`` pushing to a real receiver on
loopback, first allowed, then restarted on the same store without the allowance.
"""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from tests.apps import http_client
from tests.server import delayq_server
from tests.webhook_receiver import receiver

pytestmark = pytest.mark.timeout(120)

SUBSCRIPTIONS = "/v2/queues/q/subscriptions"
OPTION = "[notification] allowed_webhook_networks"

# Subscriber, and what the 400's description says of it.
REFUSED = [
    ("http://127.0.0.1:9/hook", "127.0.0.1 is a loopback address"),
    ("http://[::1]:9/hook", "::1 is a loopback address"),
    ("http://0x7f000001/hook", "0x7f000001 resolves to 127.0.0.1, a loopback address"),
    ("http://2130706433/hook", "2130706433 resolves to 127.0.0.1, a loopback address"),
    ("http://0177.0.0.1/hook", "0177.0.0.1 resolves to 127.0.0.1, a loopback address"),
    ("http://127.1/hook", "127.1 resolves to 127.0.0.1, a loopback address"),
    ("http://[::ffff:127.0.0.1]/hook", "::ffff:7f00:1 is a loopback address"),
    ("http://[64:ff9b::7f00:1]/hook",
     "64:ff9b::7f00:1 is a NAT64 address of 127.0.0.1 (a loopback address)"),
    ("https://10.1.2.3/hook", "10.1.2.3 is a private address"),
    ("http://192.168.1.1/hook", "192.168.1.1 is a private address"),
    ("http://[fd12::1]/hook", "fd12::1 is a unique-local (private) address"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
    ("http://[fe80::1]/hook", "fe80::1 is a link-local address"),
    ("http://224.0.0.1/hook", "224.0.0.1 is a multicast address"),
    ("http://0.0.0.0:9/hook", "0.0.0.0 is an unspecified ('this network') address"),
    ("http://0/hook", "0 resolves to 0.0.0.0, an unspecified ('this network') address"),
    ("http://[::]/hook", ":: is an unspecified address"),
    ("http://100.64.0.1/hook", "100.64.0.1 is a shared (carrier-grade NAT) address"),
    ("http://240.0.0.1/hook", "240.0.0.1 is a reserved address"),
    ("http://192.0.2.10/hook", "192.0.2.10 is a documentation address"),
]


def app(make_conf, *allowed: str):
    conf = make_conf()
    if allowed:
        conf.set_override("allowed_webhook_networks", list(allowed), group="notification")
    return http_client("sqlite", conf)


def subscribe(client, headers, subscriber: str):
    return client.simulate_post(SUBSCRIPTIONS, json={"subscriber": subscriber},
                                headers=headers)


def assert_refused(response, says: str) -> None:
    assert response.status_code == 400, response.text
    assert response.json["title"] == "Invalid API request"
    assert says in response.json["description"]


def listed(client, headers) -> list[str]:
    page = client.simulate_get(SUBSCRIPTIONS, headers=headers).json
    return [s["subscriber"] for s in page["subscriptions"]]


@pytest.mark.parametrize(("subscriber", "says"), REFUSED)
def test_a_non_public_subscriber_is_refused_at_create(make_conf, headers, subscriber, says):
    client = app(make_conf)
    response = subscribe(client, headers, subscriber)
    assert_refused(response, f"{says}. Pushes go only to public addresses")
    assert OPTION in response.json["description"]
    assert listed(client, headers) == []


def test_a_name_that_resolves_to_loopback_is_refused(make_conf, headers):
    client = app(make_conf)
    # /etc/hosts names localhost 127.0.0.1, ::1 or both: any of them is refused.
    response = subscribe(client, headers, "http://localhost:8080/hook")
    assert_refused(response, "localhost resolves to ")
    assert "a loopback address" in response.json["description"]
    assert listed(client, headers) == []


def test_a_non_public_subscriber_is_refused_at_update(make_conf, headers):
    # A documentation network stands for an operator's own network, allowed.
    client = app(make_conf, "192.0.2.0/24")
    first = "http://192.0.2.1/hook"
    created = subscribe(client, headers, first)
    assert created.status_code == 201, created.text
    sid = created.json["subscription_id"]
    for subscriber, says in REFUSED:
        if subscriber.startswith("http://192.0.2."):
            continue  # allowed here
        response = client.simulate_patch(f"{SUBSCRIPTIONS}/{sid}", headers=headers,
                                         json={"subscriber": subscriber, "ttl": 600})
        assert_refused(response, says)
    got = client.simulate_get(f"{SUBSCRIPTIONS}/{sid}", headers=headers).json
    assert (got["subscriber"], got["ttl"]) == (first, 3600)
    moved = client.simulate_patch(f"{SUBSCRIPTIONS}/{sid}", headers=headers,
                                  json={"subscriber": "http://192.0.2.2/hook"})
    assert moved.status_code == 204, moved.text


def test_public_addresses_are_taken(make_conf, headers):
    client = app(make_conf)  # the in-process app pushes nothing: nothing is contacted
    for subscriber in ("http://8.8.8.8/hook", "https://[2606:4700:4700::1111]:8443/hook",
                       "http://[64:ff9b::808:808]/hook"):
        assert subscribe(client, headers, subscriber).status_code == 201, subscriber


def test_an_allowed_network_lets_its_addresses_through(make_conf, headers):
    client = app(make_conf, "127.0.0.0/8", "fd12::/16")
    for subscriber in ("http://127.0.0.1:9/hook", "http://[::ffff:127.0.0.2]:9/hook",
                       "http://0x7f000003:9/hook", "http://[fd12::1]/hook"):
        response = subscribe(client, headers, subscriber)
        assert response.status_code == 201, f"{subscriber}: {response.text}"
    # Only its own networks: ::1 is loopback too, but not in 127.0.0.0/8.
    assert_refused(subscribe(client, headers, "http://[::1]:9/hook"),
                   "::1 is a loopback address")
    assert_refused(subscribe(client, headers, "http://10.0.0.1/hook"), "a private address")


def test_a_host_of_digits_pushes_cannot_use_is_refused_even_when_allowed(make_conf, headers):
    client = app(make_conf, "127.0.0.0/8")
    for host in ("2130706433", "127.1", "0177.0.0.1"):
        assert_refused(subscribe(client, headers, f"http://{host}:9/hook"),
                       "write it as four decimal numbers")


def test_a_host_that_does_not_resolve_is_refused(make_conf, headers):
    client = app(make_conf)
    # A name getaddrinfo finds no address for without asking DNS (a label may not begin
    # with a hyphen): the same answer as a name DNS does not know, without the network.
    response = subscribe(client, headers, "http://-nowhere.invalid/hook")
    assert_refused(response, "subscriber host '-nowhere.invalid' does not resolve to any "
                             "address")
    assert listed(client, headers) == []


def test_allowing_every_address_takes_any_subscriber_unresolved(make_conf, headers):
    client = app(make_conf, "0.0.0.0/0", "::/0")
    for subscriber in ("http://127.0.0.1:9/hook", "http://[::1]/hook",
                       "http://-nowhere.invalid/hook", "http://localhost/hook"):
        assert subscribe(client, headers, subscriber).status_code == 201, subscriber
    # ::/0 alone leaves IPv4 checked, and names resolved (the same store: another
    # subscriber).
    client = app(make_conf, "::/0")
    assert subscribe(client, headers, "http://[::1]:8/hook").status_code == 201
    assert_refused(subscribe(client, headers, "http://0x7f000001/hook"),
                   "0x7f000001 resolves to 127.0.0.1, a loopback address")


def test_a_network_with_host_bits_set_is_a_configuration_error(make_conf):
    conf = make_conf()
    with pytest.raises(ValueError, match="'10.0.0.1/8' is not an IP network in CIDR"):
        conf.set_override("allowed_webhook_networks", ["10.0.0.1/8"], group="notification")


# Delivery


PROJECT = "targets"
# Attempts 2, no wait between them: a refused push is dead-lettered at once.
POLICY = {"retries_with_no_delay": 5}


def api_client(url: str) -> httpx.Client:
    return httpx.Client(base_url=f"{url}/v2", timeout=30, headers={
        "Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT})


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def total(api: httpx.Client, queue: str) -> int:
    return api.get(f"/queues/{queue}/stats").json()["messages"]["total"]


def failures(api: httpx.Client) -> float:
    text = api.get(api.base_url.copy_with(path="/metrics")).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("delayq_push_failures_total "))


def test_a_push_to_an_address_no_longer_allowed_is_refused_as_a_failed_attempt(tmp_path):
    # localhost may be ::1 as well as 127.0.0.1.
    notification = {"push_timeout": 1, "push_scan_interval": 0.5,
                    "allowed_webhook_networks": "127.0.0.0/8, ::1"}
    config = {"drivers:transport:wsgi": {"workers": 1}, "notification": notification}
    with receiver() as hook:
        port = hook.url.split(":")[2].split("/")[0]
        # The literal address is checked at the connection; the name when it resolves.
        subscribers = {"literal": hook.url, "named": f"http://localhost:{port}/hook"}
        with delayq_server(tmp_path, config=config) as server, api_client(server.url) as api:
            for queue, subscriber in subscribers.items():
                api.put(f"/queues/{queue}", json={"_max_claim_count": 2,
                                                  "_dead_letter_queue": f"{queue}-dead"})
                made = api.post(f"/queues/{queue}/subscriptions", json={
                    "subscriber": subscriber, "ttl": 3600,
                    "options": {"_retry_policy": POLICY}})
                assert made.status_code == 201, made.text
                api.post(f"/queues/{queue}/messages", json={"messages": [{"body": queue}]})
            # Allowed, both reach the receiver.
            assert sorted(r.json["body"] for r in hook.wait_for(2, timeout=15)) == [
                "literal", "named"]

        del notification["allowed_webhook_networks"]
        with delayq_server(tmp_path, config=config) as server, api_client(server.url) as api:
            for queue in subscribers:
                api.post(f"/queues/{queue}/messages", json={"messages": [{"body": queue}]})
            for queue in subscribers:
                wait_until(lambda q=queue: total(api, f"{q}-dead") == 1, 15,
                           f"{queue}: dead-lettered after 2 refused pushes")
                [moved] = api.get(f"/queues/{queue}-dead/messages",
                                  params={"echo": "true"}).json()["messages"]
                assert moved["body"] == queue
            assert failures(api) == 4
            assert len(hook.requests()) == 2  # the two pushed while allowed
            log = server.stderr()
        assert (f"to {hook.url} refused: 127.0.0.1 is a loopback address" in log), log
        assert (f"to http://localhost:{port}/hook refused: localhost resolves to "
                in log), log
