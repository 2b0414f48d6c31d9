"""Idempotent posts (``delayq.idempotency``) on every driver: a post under a key is
stored at most once per key, queue and project within the window; a repeat is answered
with the first post's ids and stores nothing; a repeat with another body is refused
(KeyReused); a key is kept only with the messages its post stored, never without them.
"""

from __future__ import annotations

import json
import threading

import pytest

from delayq import errors, events
from delayq.broker import Broker
from delayq.idempotency import PostKey, digest
from delayq.synchronous import Synchronous
from delayq.validation import Limits, PostedMessage, Quotas
from tests.contract.helpers import CLIENT, PROJECT, claim, post

WINDOW = 300


def keyed(broker: Broker, queue: str, key: str, *bodies, project: str = PROJECT,
          window: int = WINDOW) -> list[str]:
    """Post one message per body under *key*, the body's digest that of its JSON."""
    document = json.dumps({"messages": [{"body": b} for b in bodies]}).encode()
    messages = [PostedMessage(body, None, None) for body in bodies]
    return broker.post(project, queue, CLIENT, messages, size=len(document),
                       key=PostKey(key, digest(document), window))


def held(broker: Broker, queue: str, project: str = PROJECT) -> list:
    messages, _ = broker.list_messages(project, queue, client_id="lister", marker=None,
                                       limit=20, echo=True, include_claimed=True,
                                       include_delayed=True)
    return [m.body for m in messages]


def posted_events(driver, queue: str) -> int:
    return sum(e.kind == events.POSTED for e in driver.trail.events(PROJECT, queue))


def test_a_repeat_is_answered_with_the_first_ids_and_stores_nothing(broker, driver):
    first = keyed(broker, "q", "k-1", "a", "b")
    assert keyed(broker, "q", "k-1", "a", "b") == first
    assert keyed(broker, "q", "k-1", "a", "b") == first
    assert held(broker, "q") == ["a", "b"]
    assert posted_events(driver, "q") == 2
    assert [m.id for m in broker.get_messages(PROJECT, "q", first)] == first


def test_a_repeat_with_another_body_is_refused_and_stores_nothing(broker):
    first = keyed(broker, "q", "k-1", "a")
    with pytest.raises(errors.KeyReused, match="Idempotency-Key 'k-1' was used for a post "
                                               "with another body within the last 300"):
        keyed(broker, "q", "k-1", "b")
    assert held(broker, "q") == ["a"]
    assert keyed(broker, "q", "k-1", "a") == first


def test_a_key_is_forgotten_after_its_window(broker, clock):
    first = keyed(broker, "q", "k-1", "a", window=60)
    clock.advance(59)
    assert keyed(broker, "q", "k-1", "a", window=60) == first
    clock.advance(1)
    second = keyed(broker, "q", "k-1", "a", window=60)
    assert set(second).isdisjoint(first)
    assert held(broker, "q") == ["a", "a"]
    assert keyed(broker, "q", "k-1", "a", window=60) == second


def test_keys_are_per_queue_and_per_project(broker):
    ids = {keyed(broker, "q", "k", "x")[0], keyed(broker, "r", "k", "x")[0],
           keyed(broker, "q", "k", "x", project="other")[0]}
    assert len(ids) == 3
    assert held(broker, "q") == held(broker, "r") == held(broker, "q", "other") == ["x"]


def test_unkeyed_posts_and_other_keys_go_their_way(broker):
    keyed(broker, "q", "k", "x")
    post(broker, "q", "x")
    keyed(broker, "q", "k2", "x")
    assert held(broker, "q") == ["x", "x", "x"]


def test_a_repeat_after_the_messages_left_is_still_answered(broker, clock):
    first = keyed(broker, "q", "k", "a")
    taken = claim(broker, "q")
    broker.delete_message(PROJECT, "q", first[0], taken.id)
    assert keyed(broker, "q", "k", "a") == first
    assert held(broker, "q") == []


def test_a_refused_post_keeps_no_key(driver):
    broker = Synchronous(Broker(driver.target, Limits(), quotas=Quotas(max_messages_per_queue=1)))
    keyed(broker, "q", "first", "a")
    with pytest.raises(errors.QuotaExceeded):
        keyed(broker, "q", "k", "b")
    broker.purge_queue(PROJECT, "q")
    assert len(keyed(broker, "q", "k", "b")) == 1
    assert held(broker, "q") == ["b"]


@pytest.mark.parametrize("how", ["purge_queue", "delete_queue"])
def test_purging_or_deleting_the_queue_forgets_its_keys(broker, how):
    first = keyed(broker, "q", "k", "a")
    getattr(broker, how)(PROJECT, "q")
    second = keyed(broker, "q", "k", "a")
    assert set(second).isdisjoint(first)
    assert held(broker, "q") == ["a"]


def test_concurrent_posts_under_one_key_store_once(broker, driver):
    answers: list[list[str]] = []
    failures: list[BaseException] = []
    start = threading.Barrier(4)

    def poster() -> None:
        try:
            start.wait()
            answers.append(keyed(broker, "q", "race", "a", "b"))
        except BaseException as exc:  # noqa: BLE001 - raised below
            failures.append(exc)

    threads = [threading.Thread(target=poster) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    assert len(answers) == 4 and all(answer == answers[0] for answer in answers)
    assert held(broker, "q") == ["a", "b"]
    assert posted_events(driver, "q") == 2
