"""Tallies: a queue's live, delayed and claimed counts at any instant, read without
reading its messages (the /metrics gauges).

Each message contributes instants, in integer milliseconds, each counting +1 or -1 for
its kind: when it stops being live (its expiry), delayed (its due time, or its expiry if
sooner) or claimed (its claim's expiry, or its expiry if sooner). A message posted
without a delay (due = created) has no delayed instant, a never-claimed one no claimed
instant. The count of a kind at instant T is the sum of its instants after T.

A live claim's message is claimed, never delayed, whatever its due time: a claim made
under a retry policy (``delayq.retry``) sets the due time after the claim's expiry, and
the message is delayed only from that expiry on. A claimed message with a delay has a -1
delayed instant at the earlier of its due time and its claim's expiry, so that the two
delayed instants count it from the claim's end to its due time only (never, when it is
due first).

A tally holds, for every level L, how many instants fall in each block of 2^(12 L) ms
(blocks of 1 ms, 4.1 s, 4.7 h, then 2.2 years). A count after T sums at most 4095
blocks of each level (``ranges``), however many messages there are. A change of a
message adds the difference of its instants before and after (``change``); blocks in
the past are never read again and may be forgotten (``forgettable``).

This module is the rule for every driver: SQLite keeps its tallies with triggers in each
write's transaction (``storage/sqlite/sql.py`` spells the same instants in SQL), the
others apply ``change`` after each transition they make.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from delayq.queue import QueueCounts

LIVE, DELAYED, CLAIMED = KINDS = (0, 1, 2)
LEVELS = 4
BITS = 12
HINDSIGHT = 3600  # seconds of past blocks kept, for a clock that steps back a little

Block = tuple[int, int, int]  # (kind, level, block number)


@dataclass(frozen=True, slots=True)
class Marks:
    """What a message's instants depend on, in seconds (``claim_expires`` 0: never
    claimed)."""

    created: float
    due: float
    expires: float
    claim_expires: float = 0.0


def ms(seconds: float) -> int:
    """An instant in whole milliseconds, truncated (as SQLite's ``CAST(x * 1000 AS
    INTEGER)``)."""
    return int(seconds * 1000)


def instants(marks: Marks) -> list[tuple[int, int, int]]:
    """The message's instants: ``(kind, milliseconds, +1 or -1)``."""
    found = [(LIVE, ms(marks.expires), 1)]
    delayed = marks.due > marks.created
    if delayed:
        found.append((DELAYED, ms(min(marks.due, marks.expires)), 1))
    if marks.claim_expires > 0:
        claim_ends = ms(min(marks.claim_expires, marks.expires))
        found.append((CLAIMED, claim_ends, 1))
        if delayed:  # delayed after the claim only, if at all
            found.append((DELAYED, ms(min(marks.due, marks.claim_expires, marks.expires)),
                          -1))
    return found


def change(before: Marks | None, after: Marks | None) -> Counter[Block]:
    """The blocks to add to (and, negative, take from) when a message goes from
    *before* to *after* (None: not there); blocks that do not change are left out."""
    deltas: Counter[Block] = Counter()
    for sign, marks in ((-1, before), (1, after)):
        if marks is None:
            continue
        for kind, at, counted in instants(marks):
            for level in range(LEVELS):
                deltas[(kind, level, at >> (BITS * level))] += sign * counted
    return Counter({block: n for block, n in deltas.items() if n})


def total(changes: Iterable[Counter[Block]]) -> Counter[Block]:
    """Several changes as one, blocks that cancel out left out."""
    summed: Counter[Block] = Counter()
    for deltas in changes:
        summed.update(deltas)
    return Counter({block: n for block, n in summed.items() if n})


def ranges(now: float) -> list[tuple[int, int, int | None]]:
    """``(level, first block, end block)`` per level: together the blocks cover every
    millisecond after *now*'s exactly once (the last level has no end, None).

    The first level's range starts just after *now* and runs to the next boundary of a
    second-level block; each level then continues from there to its parent's next
    boundary.
    """
    first = ms(now) + 1
    found: list[tuple[int, int, int | None]] = []
    for level in range(LEVELS):
        shift = BITS * level
        start = first >> shift
        end = ((start >> BITS) + 1) << BITS
        found.append((level, start, None if level == LEVELS - 1 else end))
        first = end << shift
    return found


def page(level: int, block: int) -> int:
    """The page of a block: blocks of one level are kept in pages of 2^12, so that a
    count reads one page per level (``reading``) and a store can keep a page as one
    record."""
    return block >> BITS


def reading(now: float) -> list[tuple[int, int]]:
    """``(level, page)`` of the pages a count at *now* reads: one per level."""
    return [(level, page(level, start)) for level, start, _ in ranges(now)]


def counts(tally: Mapping[Block, int], now: float) -> QueueCounts:
    """The queue's counts at *now* from its *tally* (blocks absent count 0)."""
    after = dict.fromkeys(KINDS, 0)
    for level, start, end in ranges(now):
        for (kind, block_level, block), n in tally.items():
            if block_level == level and block >= start and (end is None or block < end):
                after[kind] += n
    return from_sums(after)


def from_sums(after: Mapping[int, int]) -> QueueCounts:
    """QueueCounts from the number of live, delayed and claimed instants after now."""
    live, delayed, claimed = after.get(LIVE, 0), after.get(DELAYED, 0), after.get(CLAIMED, 0)
    return QueueCounts(free=live - delayed - claimed, claimed=claimed, delayed=delayed)


def forgettable(now: float) -> dict[int, int]:
    """Per level, the block number below which blocks ended ``HINDSIGHT`` or more
    before *now*: no count reads them again."""
    past = ms(now - HINDSIGHT)
    return {level: past >> (BITS * level) for level in range(LEVELS)}


def page_end(level: int, number: int) -> float:
    """When a page of a level ends, in seconds: after ``HINDSIGHT`` more, a store may
    drop it."""
    return ((number + 1) << (BITS * (level + 1))) / 1000
