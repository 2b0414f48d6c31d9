"""Per-message derivations from the event trail, shared by both audits (docs/audits.md).

The trail is grouped once per message: each message ``(project, message_id)`` gets the
facts that are aggregates of its events (its event count, first delivery, last known
expiry) and, as small arrays, the events the other facts need: its arrivals, its
endings and its due changes. The due in force and the end of each stay are then
computed inside those arrays with Spark's higher-order functions. That is one shuffle of
the trail, however many facts the audits derive. Purges belong to a queue, not a
message: their events group apart (they have no message id) and each queue's purge
times are broadcast to the stays.

A message is identified by ``(project, message_id)``: ids survive dead-letter moves, and
a move never leaves the project. A *stay* is a message's time in one queue from a
``start`` instant: from its post (delay audit) or from a move into a dead-letter queue
(dead-letter audit); ``Trail.of`` gives one row per stay, with how it ended, and one row
per redrive (an arrival that starts no stay the audits measure).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from delayq import events as ev

MESSAGE = ["project", "message_id"]
MESSAGE_HASH = "message_hash"  # xxhash64 of MESSAGE, leading the key the trail groups by
QUEUE = ["project", "queue"]
# Up to this many message ids are listed where the audits name examples.
SAMPLE_IDS = 10

# The columns of an event the audits use (claim ids and ttls they do not).
COLUMNS = ("project", "queue", "kind", "time", "message_id", "claim_count", "due",
           "expires", "source", "target", "body")
# The fields of an arrival (or purge) kept when the trail is grouped per message.
ARRIVAL_FIELDS = ("kind", "time", "queue", "source", "target", "due", "claim_count", "body")

# Events that end a message's stay in the queue whose trail holds them; ``purged`` ends
# every stay of its queue at once and is handled apart.
MESSAGE_ENDINGS = tuple(kind for kind in ev.ENDINGS if kind != ev.PURGED)
# Events that tell a message's expiry, in the order they happen to it at one instant: a
# post, then claims, then the move (which carries the same claim count as the claim
# before it; a claim in the dead-letter queue then counts one more).
EXPIRY_EVENTS = (ev.POSTED, ev.CLAIMED, ev.DEAD_LETTERED)
DELIVERIES = (ev.CLAIMED, ev.POPPED)
# Events that set when a message is due, in the order they happen at one instant: the
# post, then edits (an edit of a message at its post instant comes after it).
DUE_EVENTS = (ev.POSTED, ev.EDITED)
# Events by which a queue receives a message, each with the field naming that queue.
ARRIVALS = {ev.POSTED: "queue", ev.DEAD_LETTERED: "target", ev.REDRIVEN: "target"}
# Arrivals that start a stay the audits measure.
STAYS = (ev.POSTED, ev.DEAD_LETTERED)
# Columns of Trail.events that Trail.stays turns into end_time and end_kind.
ENDING_COLUMNS = ("explicit_time", "explicit_kind", "expiry")


def kind_is(*kinds: str) -> Column:
    """Rows whose event kind is one of *kinds*."""
    return F.col("kind").isin(*kinds)


def until(events: DataFrame, as_of: float) -> DataFrame:
    """The events at or before *as_of* (later ones are ignored by the audits), with the
    columns the audits use."""
    return events.where(F.col("time") <= F.lit(as_of)).select(*COLUMNS)


def _rank(kind: Column, order: tuple[str, ...]) -> Column:
    """1 + the position of *kind* in *order*: which of same-instant events came first."""
    return F.array_position(F.array(*map(F.lit, order)), kind)


@dataclass(frozen=True, slots=True)
class Trail:
    """The trail as of ``as_of``: one row per arrival of a message in a queue, and one
    per purge (``events``, the rows ``arrivals`` gives).

    Rows of arrivals: ``kind`` (posted, dead_lettered or redriven), ``project``,
    ``queue`` (the queue the message arrived in), ``source`` (the queue a move or
    redrive came from), ``message_id``, ``start`` (the arrival's time), ``due`` and
    ``delay`` (of a post), ``claim_count`` and ``body`` (of a move),
    ``first_delivery`` and ``due_in_force`` (of the message), ``explicit_time`` and
    ``explicit_kind`` (the first ending event of the stay that began there) and
    ``expiry`` (the message's last known expiry, when at or before ``as_of``). Rows of
    purges: ``kind`` purged, ``project``, ``queue``, ``start`` (its time). ``events``,
    on one row per message (and per project's purges), counts its events; a message
    none of whose events is an arrival has that row only (``kind`` null).
    """

    events: DataFrame
    as_of: float

    @classmethod
    def of(cls, events: DataFrame, as_of: float) -> Trail:
        """The trail of *events* (cut at *as_of* here if not already): one shuffle, the
        events grouped per message (purges, which have no message id, group apart)."""
        return cls.of_partials(partials(until(events, as_of)), as_of)

    @classmethod
    def of_partials(cls, messages: DataFrame, as_of: float) -> Trail:
        """The trail of the ``partials`` of events at or before *as_of*."""
        return cls(arrivals(messages, as_of), as_of)

    def event_count(self) -> int:
        """How many events of the trail there are (at or before ``as_of``)."""
        total = self.events.agg(F.sum("events")).first()
        assert total is not None  # an aggregate without grouping has one row, always
        return total[0] or 0

    def materialized(self) -> Trail:
        """This trail computed now and kept (a local checkpoint: in the executors'
        memory, spilling to disk), for the several queries of the audits."""
        return Trail(self.events.localCheckpoint(eager=True), self.as_of)

    @property
    def arrivals(self) -> DataFrame:
        """The rows of messages arriving in queues (purges left out)."""
        return self.events.where(kind_is(*ARRIVALS))

    def stays(self, kind: str) -> DataFrame:
        """The arrivals of *kind* (posted or dead_lettered) with ``end_time`` and
        ``end_kind``: how the stay that began there ended (null while it lasts).

        The end of a stay is the first ending event (popped, deleted, dead_lettered,
        redriven, expired) of the message in the queue at or after ``start``: it proves
        the message lived until then. Without one, it is the earlier of the queue's
        first purge at or after ``start`` and the implicit expiry: the message's last
        known expiry when that is at or before the audit time (drivers write
        ``expired`` events only when they remove the message, none when the backend
        drops it on its own — MongoDB's TTL backstop, Swift's expirer — and an explicit
        one is an ending above, never counted twice). An implicit expiry counts as
        ``expired`` and wins a tie with a purge (a message is gone at its expiry
        instant). An implicit expiry before ``start`` (a message moved to a dead-letter
        queue keeps its original expiry, which claims may have outlived) is taken at
        ``start``: the message expired on arrival.
        """
        purges = (self.events.where(kind_is(ev.PURGED)).groupBy(*QUEUE)
                  .agg(F.collect_list("start").alias("purge_times")))
        start = F.col("start")
        found = (self.events.where(kind_is(kind))
                 .join(F.broadcast(purges), QUEUE, "left")
                 .withColumn("purge", F.array_min(F.filter("purge_times",
                                                           lambda t: t >= start))))
        explicit, purge, expiry = F.col("explicit_time"), F.col("purge"), F.col("expiry")
        implicit = F.greatest(expiry, start)
        implicit_first = expiry.isNotNull() & (purge.isNull() | (implicit <= purge))
        return found.select(
            *(c for c in self.events.columns if c not in ENDING_COLUMNS),
            F.when(explicit.isNotNull(), explicit)
             .when(implicit_first, implicit)
             .otherwise(purge).alias("end_time"),
            F.when(explicit.isNotNull(), F.col("explicit_kind"))
             .when(implicit_first, F.lit(ev.EXPIRED))
             .when(purge.isNotNull(), F.lit(ev.PURGED)).alias("end_kind"))


# Facts of one message, gathered as its events are grouped


def _where(kinds: tuple[str, ...], value: Column) -> Column:
    """*value* on events of *kinds*, null on others (which aggregates then skip)."""
    return F.when(kind_is(*kinds), value)


def first_delivery() -> Column:
    """The time of the message's earliest ``claimed`` or ``popped`` event, in any
    queue; null when it has none."""
    return F.min(_where(DELIVERIES, F.col("time")))


def latest_expiry_event() -> Column:
    """struct(time, claim_count, rank, expires) of the message's latest posted, claimed
    or dead_lettered event: its ``expires`` is the last known expiry.

    Events at the same instant (a fake clock, a fast consumer) are put in the order
    they happened by their claim count, then by EXPIRY_EVENTS. ``expires`` comes last,
    so events equal on the rest pick the same expiry whichever is seen first; the
    greatest of two such structs is the greatest of all their events', which is what
    lets partial groupings merge.
    """
    return F.max(_where(EXPIRY_EVENTS, F.struct(
        F.col("time").alias("time"),
        F.coalesce(F.col("claim_count"), F.lit(0)).alias("claim_count"),
        _rank(F.col("kind"), EXPIRY_EVENTS).alias("rank"),
        F.col("expires").alias("expires"))))


def due_changes() -> Column:
    """The message's ``posted`` and ``edited`` events as struct(time, rank, due), the
    rank putting same-instant ones in the order they happen (DUE_EVENTS)."""
    return F.collect_list(_where(DUE_EVENTS, F.struct(
        F.col("time").alias("time"), _rank(F.col("kind"), DUE_EVENTS).alias("rank"),
        F.col("due").alias("due"))))


def due_in_force(changes: Column, delivered_at: Column) -> Column:
    """The ``due`` of the latest of *changes* (``due_changes``) at or before
    *delivered_at*, or of the latest when *delivered_at* is null (the trail is cut at
    the audit time). An edit (PATCH of an unclaimed message) may move the due time
    either way; a delivery is measured against the one it had then.
    """
    return F.array_max(F.filter(changes, lambda c: delivered_at.isNull()
                                | (c["time"] <= delivered_at)))["due"]


def endings() -> Column:
    """The message's ending events as struct(time, kind, queue), so the least of them is
    the earliest, then the earliest kind by name among same-instant ones."""
    return F.collect_list(_where(MESSAGE_ENDINGS, F.struct(
        F.col("time").alias("time"), F.col("kind").alias("kind"),
        F.col("queue").alias("queue"))))


def explicit_end(ends: Column, queue: Column, start: Column) -> Column:
    """struct(time, kind, queue) of the first of *ends* (``endings``) in *queue* at or
    after *start*; null when none."""
    return F.array_min(F.filter(ends, lambda e: (e["queue"] == queue) & (e["time"] >= start)))


def arrivals_and_purges() -> Column:
    """The message's arrivals (and a queue's purges) as structs of ARRIVAL_FIELDS."""
    return F.collect_list(_where((*ARRIVALS, ev.PURGED), F.struct(*ARRIVAL_FIELDS)))


def _keyed(events: DataFrame) -> DataFrame:
    """*events* with MESSAGE_HASH, the body kept only on a move: the audits read bodies
    of moved messages alone, and every post's body would ride the shuffle."""
    return (events.select(F.xxhash64(*MESSAGE).alias(MESSAGE_HASH), "*")
            .withColumn("body", _where((ev.DEAD_LETTERED,), F.col("body"))))


# The columns of a partial grouping (``partials``) that are lists, merged by concatenation.
LISTS = ("due_changes", "endings", "arrivals")


def partials(events: DataFrame) -> DataFrame:
    """One row per message (``message_id`` null for the events that have none, purges)
    with what its *events* say, every column of a kind that merges with the same
    columns of its other events (``merged``): MESSAGE_HASH, MESSAGE, ``events`` (a
    count), ``first_delivery`` (a minimum), ``expiry_event`` (a greatest), and the
    lists LISTS of its due changes, endings and arrivals.

    The events are hashed by message before they are grouped: grouped straight from
    the read, Spark would collect partial arrays on each reading task, sort them and
    shuffle the arrays; hashed first, rows are shuffled and each array is built once.
    The grouping key leads with that 64-bit hash: the array aggregates group by sorting,
    and a sort compares the first key column's leading bytes before whole keys, which
    for the project (the same for most events) never decide and for message ids (some
    drivers' start with a timestamp) often do not.
    """
    return (_keyed(events).repartition(MESSAGE_HASH).groupBy(MESSAGE_HASH, *MESSAGE).agg(
        F.count(F.lit(1)).alias("events"),
        first_delivery().alias("first_delivery"),
        latest_expiry_event().alias("expiry_event"),
        due_changes().alias("due_changes"),
        endings().alias("endings"),
        arrivals_and_purges().alias("arrivals")))


def touched(later: DataFrame) -> DataFrame:
    """The message hashes of *later*'s partials, to be broadcast: the few messages a
    merge regroups."""
    return F.broadcast(later.select(MESSAGE_HASH).distinct())


def without(earlier: DataFrame, later: DataFrame) -> DataFrame:
    """The rows of *earlier* whose message *later* has no row for."""
    return earlier.join(touched(later), MESSAGE_HASH, "left_anti")


def regrouped(earlier: DataFrame, later: DataFrame) -> DataFrame:
    """The partials of the messages *later* has rows for, merged with *earlier*'s rows
    of the same messages: together with ``without(earlier, later)``, the partials of
    both sets of events.

    Only those messages are grouped again, so the cost follows *later*'s size, however
    large *earlier* is. A hash two messages share only sends a message through the
    merge it did not need.
    """
    both = earlier.join(touched(later), MESSAGE_HASH, "left_semi").unionByName(later)
    return both.groupBy(MESSAGE_HASH, *MESSAGE).agg(
        F.sum("events").alias("events"),
        F.min("first_delivery").alias("first_delivery"),
        F.max("expiry_event").alias("expiry_event"),
        *(F.flatten(F.collect_list(name)).alias(name) for name in LISTS))


def merged(earlier: DataFrame, later: DataFrame) -> DataFrame:
    """The partials of two sets of events, *earlier* (many messages, typically read
    back from an audit's state) and *later* (typically few)."""
    return without(earlier, later).unionByName(regrouped(earlier, later))


def arrivals(messages: DataFrame, as_of: float) -> DataFrame:
    """The rows of ``Trail.events`` from the ``partials`` of a trail cut at *as_of*."""
    messages = messages.select(
        "*", F.col("expiry_event.expires").alias("expiry"),
        due_in_force(F.col("due_changes"), F.col("first_delivery")).alias("due_in_force"))
    kind = F.col("e.kind")
    # A message none of whose events is an arrival keeps one row (kind null), for the
    # count of its events.
    arrived = messages.select(
        *MESSAGE, "events", "endings", "first_delivery", "due_in_force", "expiry",
        F.posexplode_outer("arrivals").alias("pos", "e"))
    queue = F.coalesce(*(F.when(kind == F.lit(k), F.col("e")[field])
                         for k, field in ARRIVALS.items()), F.col("e.queue"))
    start, stay = F.col("e.time"), kind.isin(*STAYS)
    ended = arrived.select(
        "*", F.when(stay, explicit_end(F.col("endings"), queue, start)).alias("explicit"))
    return ended.select(
        kind.alias("kind"), "project", queue.alias("queue"),
        F.col("e.source").alias("source"), "message_id", start.alias("start"),
        F.col("e.due").alias("due"), (F.col("e.due") - start).alias("delay"),
        F.col("e.claim_count").alias("claim_count"), F.col("e.body").alias("body"),
        "first_delivery", "due_in_force",
        F.col("explicit.time").alias("explicit_time"),
        F.col("explicit.kind").alias("explicit_kind"),
        F.when(stay & (F.col("expiry") <= F.lit(as_of)), F.col("expiry")).alias("expiry"),
        F.when(F.coalesce(F.col("pos"), F.lit(0)) == 0, F.col("events")).alias("events"))
