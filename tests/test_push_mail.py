"""mailto: subscribers end to end: the real ``delayq-server`` (on SQLite) mails each
message through a real SMTP server on loopback (tests/smtp_server.py) when it is due,
never before; a server that refuses the mail is a failed attempt, retried as the retry
policy says and dead-lettered after ``_max_claim_count``; a confirmation request is a
mail from Zaqar's template."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest

from tests.server import api_client, delayq_server
from tests.smtp_server import smtp_server
from tests.test_push import SLACK, post, queue_name, subscribe, total, wait_until

pytestmark = pytest.mark.timeout(120)

PROJECT = "mail"
TO = "ops@example.com"


@pytest.fixture(scope="module")
def smtp():
    with smtp_server() as server:
        yield server


@pytest.fixture(scope="module")
def server(tmp_path_factory, smtp):
    config = {"notification": {"push_timeout": 2.0, "push_scan_interval": 0.5,
                               "smtp_host": "127.0.0.1", "smtp_port": smtp.port},
              "transport": {"max_message_delay": 900}}
    with delayq_server(tmp_path_factory.mktemp("mail"), config=config) as running:
        yield running


@pytest.fixture
def api(server, smtp):
    smtp.refusing = False
    with api_client(server, PROJECT) as client:
        yield client


def mails_to(smtp, queue: str) -> list:
    return [m for m in smtp.mails if json.loads(m.body).get("queue_name") == queue]


def test_a_message_is_mailed_when_due_never_before(api, smtp):
    queue = queue_name()
    api.put(f"/queues/{queue}", json={"_default_message_delay": 2})  # a delayed queue
    subscribe(api, queue, f"mailto:{TO}?subject=Due%20now", **{"from": "delayq@example.com"})
    before = time.time()
    [mid] = post(api, queue, {"body": {"n": 1}, "ttl": 300, "delay": 3})
    wait_until(lambda: mails_to(smtp, queue), 15, "the mail")
    [mail] = mails_to(smtp, queue)
    assert mail.at >= before + 3  # never early
    assert mail.at - (before + 3) < SLACK
    assert mail.recipients == [TO]
    assert mail.message["To"] == TO and mail.message["From"] == "delayq@example.com"
    assert mail.message["Subject"] == "Due now"
    assert json.loads(mail.body) == {"id": mid, "body": {"n": 1}, "ttl": 300,
                                     "age": json.loads(mail.body)["age"], "claim_count": 1,
                                     "queue_name": queue, "Message_Type": "Notification"}
    wait_until(lambda: total(api, queue) == 0, 5, "the mailed message deleted")


def test_a_refusing_server_is_retried_then_dead_lettered(api, smtp):
    queue, dead = queue_name(), queue_name()
    api.put(f"/queues/{dead}")
    api.put(f"/queues/{queue}", json={"_max_claim_count": 2, "_dead_letter_queue": dead})
    smtp.refusing = True
    refused_before = smtp.refused
    subscribe(api, queue, f"mailto:{TO}", subject="s",
              _retry_policy={"retries_with_no_delay": 1, "minimum_delay_retries": 0,
                             "minimum_delay": 1, "maximum_delay": 11,
                             "maximum_delay_retries": 0})
    post(api, queue, {"body": "x", "ttl": 300})
    wait_until(lambda: smtp.refused - refused_before >= 2, 15, "two refused attempts")
    wait_until(lambda: total(api, dead) == 1, 15, "the message dead-lettered")
    assert total(api, queue) == 0 and not mails_to(smtp, queue)


def test_a_refused_mail_is_sent_again_once_the_server_takes_it(api, smtp):
    queue = queue_name()
    smtp.refusing = True
    refused_before = smtp.refused
    subscribe(api, queue, f"mailto:{TO}",
              _retry_policy={"retries_with_no_delay": 0, "minimum_delay_retries": 1,
                             "minimum_delay": 1, "maximum_delay": 11,
                             "maximum_delay_retries": 0})
    post(api, queue, {"body": "again", "ttl": 300})
    wait_until(lambda: smtp.refused > refused_before, 10, "a refused attempt")
    smtp.refusing = False
    wait_until(lambda: mails_to(smtp, queue), 15, "the mail, retried")
    assert json.loads(mails_to(smtp, queue)[0].body)["claim_count"] == 2


def test_a_bad_mailto_subscriber_is_a_400(api):
    for bad in ("mailto:", "mailto:nobody", "mailto:a@b.com,c@d.com",
                "mailto:Name <a@b.com>", "mailto:a@b.com?subject=x%0d%0aBcc:%20c@d.com"):
        response = api.post(f"/queues/{queue_name()}/subscriptions",
                            json={"subscriber": bad})
        assert response.status_code == 400, (bad, response.text)
        assert "mailto" in response.json()["description"]
    for options in ({"from": 1}, {"subject": "a\nBcc: c@d.com"}):
        response = api.post(f"/queues/{queue_name()}/subscriptions",
                            json={"subscriber": f"mailto:{TO}", "options": options})
        assert response.status_code == 400, (options, response.text)
        assert "mailto" in response.json()["description"]


def test_a_confirmation_request_is_a_mail_from_zaqars_template(tmp_path, smtp):
    config = {"notification": {"push_scan_interval": 0.5, "smtp_host": "127.0.0.1",
                               "smtp_port": smtp.port, "require_confirmation": True,
                               "external_confirmation_url": "https://confirm.example/page"},
              "signed_url": {"secret_key": "mail-key"}}
    with delayq_server(tmp_path, config=config) as running, httpx.Client(
            base_url=f"{running.url}/v2", timeout=30,
            headers={"Client-ID": str(uuid.uuid4()), "X-Project-ID": PROJECT}) as api:
        queue = queue_name()
        count = len(smtp.mails)
        sid = subscribe(api, queue, "mailto:new@example.com")
        mail = smtp.wait_for(count + 1, timeout=10)[count]
        assert mail.recipients == ["new@example.com"]
        assert mail.message["Subject"] == "Zaqar Notification - Subscription Confirmation"
        assert mail.message["From"] == "Zaqar Notifications <no-reply@openstack.org>"
        assert mail.body.startswith(
            f"You have chosen to subscribe to the queue: {queue}. This queue belongs to "
            f"project: {PROJECT}. To confirm this subscription, click or visit this link "
            f"below: https://confirm.example/page?Signature=")
        assert f"%2Fsubscriptions%2F{sid}%2Fconfirm" in mail.body
        # Unconfirmed, nothing else is mailed.
        post(api, queue, {"body": "held", "ttl": 300})
        time.sleep(2)
        assert len(smtp.mails) == count + 1 and total(api, queue) == 1
