"""Message and claim ids, on every driver: no client can guess one from others it has seen,
and nothing orders by id (listings, claims, reads by id and stats go by post order).

Ids are opaque strings of a different form on each driver, so they are judged from the
outside: over many ids of one queue, how many values each character position takes. A
counter or a clock varies in a few trailing positions only; a random part varies in all
of its own, each taking about every value of its alphabet.
"""

from __future__ import annotations

import math
import random

import pytest

from delayq import errors
from delayq.validation import MessageEdit
from tests.contract.helpers import CLIENT, PROJECT, claim, listed_ids, post

MIN_RANDOM_BITS = 64
TAIL = 13  # the last characters of an id: random on every driver


def varying_bits(ids: list[str]) -> int:
    """Bits the ids vary in, estimated position by position: a position that takes n
    values counts log2(n) rounded up (the alphabet it draws from, when enough ids show
    more than half of it)."""
    assert len({len(i) for i in ids}) == 1, "one queue's ids have one length"
    return sum(math.ceil(math.log2(len({i[k] for i in ids}))) for k in range(len(ids[0])))


def differing_positions(a: str, b: str) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True)) + abs(len(a) - len(b))


def assert_unguessable(ids: list[str]) -> None:
    """*ids*, in the order they were made, carry MIN_RANDOM_BITS and no sequence."""
    assert len(set(ids)) == len(ids)
    assert varying_bits(ids) >= MIN_RANDOM_BITS, ids[:5]
    # Ids made one after the other do not differ only in a counter's last digits.
    assert min(differing_positions(a, b) for a, b in zip(ids, ids[1:], strict=False)) >= 5, ids[:5]
    # Their random tails are all different and follow no order.
    tails = [i[-TAIL:] for i in ids]
    assert len(set(tails)) == len(tails)
    assert tails != sorted(tails) and tails != sorted(tails, reverse=True)


def chimeras(a: str, b: str) -> list[str]:
    """Every id made of the start of one of two ids and the end of the other (the same
    queue's prefix, counter or time with the other's random part, among others): none
    is either id."""
    assert len(a) == len(b)
    made = {x[:k] + y[k:] for x, y in ((a, b), (b, a)) for k in range(1, len(a))}
    last = "0" if a[-1] != "0" else "1"
    made.add(a[:-1] + last)  # one character off
    return sorted(made - {a, b})


def test_message_ids_carry_64_random_bits(broker):
    ids = []
    for n in range(10):
        ids += post(broker, "q", *(f"m{n}-{i}" for i in range(10)))
    assert_unguessable(ids)


def test_claim_ids_carry_64_random_bits(broker):
    for n in range(10):
        post(broker, "q", *(f"m{n}-{i}" for i in range(10)))
    claim_ids = [claim(broker, "q", limit=1).id for _ in range(100)]
    assert_unguessable(claim_ids)


def test_an_id_with_another_ids_parts_finds_no_message(broker):
    a, b = post(broker, "q", "a", "b")
    [c] = post(broker, "q", "c")
    fakes = chimeras(a, b) + chimeras(b, c)
    assert broker.get_messages(PROJECT, "q", fakes) == []
    for fake in fakes:
        with pytest.raises(errors.MessageNotFound):
            broker.get_message(PROJECT, "q", fake)
        with pytest.raises(errors.MessageNotFound):
            broker.edit_message(PROJECT, "q", fake, MessageEdit(body="changed"))
        broker.delete_message(PROJECT, "q", fake, None)
    broker.delete_messages(PROJECT, "q", fakes)
    assert [m.body for m in broker.get_messages(PROJECT, "q", [a, b, c])] == ["a", "b", "c"]


def test_an_id_with_another_ids_parts_finds_no_claim(broker):
    [a] = post(broker, "q", "a")
    first = claim(broker, "q")
    post(broker, "q", "b")
    second = claim(broker, "q")
    fakes = chimeras(first.id, second.id)
    for fake in fakes:
        with pytest.raises(errors.ClaimNotFound):
            broker.get_claim(PROJECT, "q", fake)
        with pytest.raises(errors.ClaimNotFound):
            broker.renew_claim(PROJECT, "q", fake, 60, 60)
        with pytest.raises(errors.ClaimUnknown):  # names no live claim: 400, as Zaqar
            broker.delete_message(PROJECT, "q", a, fake)
        with pytest.raises(errors.ClaimMismatch):
            broker.release_message(PROJECT, "q", a, fake, 0)
        broker.release_claim(PROJECT, "q", fake)
    assert broker.get_message(PROJECT, "q", a).live_claim_id == first.id
    assert [m.id for m in broker.get_claim(PROJECT, "q", first.id).messages] == [a]


def test_paging_returns_each_message_once_in_post_order(broker, clock):
    posted = []
    for n, size in enumerate([3, 1, 7, 2, 5, 4, 6, 1, 3, 8]):
        posted += post(broker, "q", *(f"m{n}-{i}" for i in range(size)))
        if n % 3 == 0:
            clock.advance(1)
    pages, marker = [], None
    while True:
        messages, marker = broker.list_messages(
            PROJECT, "q", client_id=CLIENT, marker=marker, limit=7, echo=True,
            include_claimed=True, include_delayed=True)
        if not messages:
            break
        pages.append([m.id for m in messages])
    assert len(pages) == math.ceil(len(posted) / 7)
    assert [i for page in pages for i in page] == posted
    # Claimed ones drop out of a default listing, the rest keep their order.
    held = {m.id for m in claim(broker, "q", limit=5).messages}
    assert held == set(posted[:5])
    shown, marker = [], None
    while True:
        messages, marker = broker.list_messages(
            PROJECT, "q", client_id=CLIENT, marker=marker, limit=4, echo=True,
            include_claimed=False, include_delayed=False)
        if not messages:
            break
        shown += [m.id for m in messages]
    assert shown == posted[5:] == listed_ids(broker, "q", limit=len(posted))


def test_claims_reads_and_stats_go_by_post_order(broker):
    posted = []
    for n in range(6):
        posted += post(broker, "q", *(f"m{n}-{i}" for i in range(5)))
    shuffled = posted[:20]
    random.Random(7).shuffle(shuffled)
    assert [m.id for m in broker.get_messages(PROJECT, "q", shuffled)] == posted[:20]
    stats = broker.stats(PROJECT, "q")
    assert (stats.oldest.id, stats.newest.id) == (posted[0], posted[-1])
    claimed = []
    while result := claim(broker, "q", limit=8):
        claimed += [m.id for m in result.messages]
    assert claimed == posted
