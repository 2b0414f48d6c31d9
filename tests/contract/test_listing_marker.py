"""A message listing's marker: a next link's position or, as Zaqar's clients give it, the
id of a message to list after."""

from __future__ import annotations

import pytest

from delayq import errors
from tests.contract.helpers import CLIENT, PROJECT, claim, claimed_ids, create, post


def listing(broker, marker: str | None, *, limit: int = 20, include_claimed: bool = True
            ) -> tuple[list[str], str | None]:
    messages, next_marker = broker.list_messages(
        PROJECT, "q", client_id=CLIENT, marker=marker, limit=limit, echo=True,
        include_claimed=include_claimed, include_delayed=True)
    return [m.id for m in messages], next_marker


def test_a_message_id_marker_lists_the_messages_after_it(broker):
    ids = post(broker, "q", *range(6))
    assert listing(broker, ids[1])[0] == ids[2:]
    assert listing(broker, ids[-1]) == ([], None)
    # Paging with ids, as a Zaqar client may: each page's last id is the next marker.
    pages, marker = [], None
    while page := listing(broker, marker, limit=4)[0]:
        pages.append(page)
        marker = page[-1]
    assert pages == [ids[:4], ids[4:]]


def test_an_id_marker_mixes_with_next_links(broker):
    ids = post(broker, "q", *range(5))
    first, next_marker = listing(broker, ids[0], limit=2)
    assert first == ids[1:3]
    assert next_marker is not None
    assert listing(broker, next_marker)[0] == ids[3:]


def test_an_id_marker_keeps_its_place_when_its_message_is_hidden(broker):
    ids = post(broker, "q", *range(5))
    held = claim(broker, "q", limit=2)
    assert held is not None and [m.id for m in held.messages] == ids[:2]
    # The claimed message is left out of the listing, not its place in the queue.
    assert listing(broker, ids[1], include_claimed=False)[0] == ids[2:]


# The stores whose message ids tell their place in post order after the message is gone.
PLACE_IN_ID = ("redis", "swift")


def test_an_id_marker_naming_a_deleted_message_lists_without_error(broker, spec):
    ids = post(broker, "q", *range(5))
    broker.delete_message(PROJECT, "q", ids[1], None)
    # After it where its id tells its place, else from the start (sqlite, mongodb): a
    # client paging with ids may see messages again, but misses none.
    expected = ids[2:] if spec.name in PLACE_IN_ID else [ids[0], *ids[2:]]
    assert listing(broker, ids[1])[0] == expected


@pytest.mark.parametrize("marker", [
    "not-a-message-id", "-1", "+1", " 1", "1.5", "12345678901234567890",
    "9223372036854775808", "f" * 200, "é"])
def test_a_malformed_marker_is_refused(broker, marker):
    post(broker, "q", "a")
    with pytest.raises(errors.ValidationError, match="marker"):
        listing(broker, marker)


def test_an_id_marker_names_a_message_moved_in_from_another_queue(broker, clock):
    create(broker, "src", _max_claim_count=1, _dead_letter_queue="q")
    first = post(broker, "q", "first")
    moved = post(broker, "src", "moved")
    clock.advance(1)
    assert claimed_ids(broker, "src", ttl=60) == moved
    clock.advance(60)
    assert claim(broker, "src") is None  # over its claim count: moved to q, its id kept
    last = post(broker, "q", "last")
    assert listing(broker, None)[0] == first + moved + last
    assert listing(broker, moved[0])[0] == last
