"""``delayq.tallies``: counts summed from block tallies equal counts made by looking at
every message, at any instant, through any sequence of changes."""

from __future__ import annotations

import random
from collections import Counter

from delayq import tallies
from delayq.queue import QueueCounts
from delayq.tallies import Marks


def looked_at(messages: dict[int, Marks], now: float) -> QueueCounts:
    free = claimed = delayed = 0
    for m in messages.values():
        if tallies.ms(m.expires) <= tallies.ms(now):
            continue
        if m.claim_expires and tallies.ms(m.claim_expires) > tallies.ms(now):
            claimed += 1
        elif m.due > m.created and tallies.ms(m.due) > tallies.ms(now):
            delayed += 1
        else:
            free += 1
    return QueueCounts(free, claimed, delayed)


def random_marks(rng: random.Random, now: float) -> Marks:
    """A state a message can be in: a claimed one was due when claimed."""
    # Spans from milliseconds to weeks, so that every level's blocks are met.
    span = rng.choice([0.005, 3, 5000, 90000, 1.3e6])
    created = now - rng.choice([0, rng.uniform(0, span)])
    expires = now + rng.uniform(span / 2, span * 2)
    if rng.random() < 0.4:  # claimed now, after a delay that has passed or none
        due = rng.choice([created, rng.uniform(created, now)])
        claim_expires = now + rng.uniform(0, span)
        if rng.random() < 0.3:  # under a retry policy: due again a wait after the claim,
            # or before its end when a renewal without the policy outlived that
            due = rng.choice([claim_expires + rng.choice([0, rng.uniform(0, span)]),
                              rng.uniform(now, claim_expires)])
        return Marks(created, due, expires, claim_expires=claim_expires)
    due = rng.choice([created, now + rng.uniform(0, span)])
    return Marks(created, due, expires)


def test_counts_match_a_look_at_every_message_through_random_changes():
    rng = random.Random(7)
    messages: dict[int, Marks] = {}
    tally: Counter = Counter()
    now = 1.8e9 + 0.123
    for step in range(3000):
        key = rng.randrange(300)
        before = messages.get(key)
        after = None if before and rng.random() < 0.3 else random_marks(rng, now)
        if after is None:
            del messages[key]
        else:
            messages[key] = after
        tally.update(tallies.change(before, after))
        if step % 50 == 0:
            for ahead in (0, 0.0004, 0.002, 2.5, 4000, 80000, 2e6):
                at = now + ahead
                assert tallies.counts(tally, at) == looked_at(messages, at), (step, ahead)
        now += rng.choice([0, 0.001, 0.7, 30])


def test_a_count_reads_one_page_per_level():
    now = 1.8e9 + 12.3456
    pages = tallies.reading(now)
    assert [level for level, _ in pages] == list(range(tallies.LEVELS))
    for level, start, end in tallies.ranges(now):
        assert (level, tallies.page(level, start)) in pages
        if end is not None:
            assert tallies.page(level, end - 1) == tallies.page(level, start)


def test_a_change_that_moves_nothing_changes_no_block():
    marks = Marks(created=1.0, due=5.0, expires=100.0, claim_expires=0.0)
    assert tallies.change(marks, marks) == Counter()
    assert tallies.total([tallies.change(None, marks), tallies.change(marks, None)]) \
        == Counter()
