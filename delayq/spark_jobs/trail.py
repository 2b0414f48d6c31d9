"""Per-message derivations from the event trail, shared by both audits (docs/audits.md).

Every function takes the trail as a DataFrame of ``source.EVENT_SCHEMA`` rows already cut
at the audit time (``until``), and returns a DataFrame: the audits aggregate them per
queue and collect only those aggregates.

A message is identified by ``(project, message_id)``: ids survive dead-letter moves, and
a move never leaves the project. A *stay* is a message's time in one queue from a
``start`` instant: from its post (delay audit) or from a move into a dead-letter queue
(dead-letter audit); ``ends`` finds how each stay ended.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from delayq import events as ev

MESSAGE = ["project", "message_id"]
STAY = ["project", "queue", "message_id", "start"]

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


def kind_is(*kinds: str) -> Column:
    """Rows whose event kind is one of *kinds*."""
    return F.col("kind").isin(*kinds)


def until(events: DataFrame, as_of: float) -> DataFrame:
    """The events at or before *as_of*: later ones are ignored by the audits."""
    return events.where(F.col("time") <= F.lit(as_of))


def posted(events: DataFrame) -> DataFrame:
    """One row per ``posted`` event: project, queue, message_id, posted_at, due and
    delay (= due - posted_at; the message is *delayed* when it is above 0)."""
    return events.where(kind_is(ev.POSTED)).select(
        "project", "queue", "message_id", F.col("time").alias("posted_at"), "due",
        (F.col("due") - F.col("time")).alias("delay"))


def first_deliveries(events: DataFrame) -> DataFrame:
    """project, message_id, first_delivery: its earliest ``claimed`` or ``popped`` event
    in any queue."""
    return (events.where(kind_is(*DELIVERIES)).groupBy(*MESSAGE)
            .agg(F.min("time").alias("first_delivery")))


def due_in_force(messages: DataFrame, events: DataFrame) -> DataFrame:
    """*messages* (columns MESSAGE, ``first_delivery`` and any others) with
    ``due_in_force``: the ``due`` of the message's latest ``posted`` or ``edited`` event
    at or before its first delivery, or, when it has none, of its latest one (the events
    are cut at the audit time). An edit (PATCH of an unclaimed message) may move the due
    time either way; the delivery is measured against the one it had then.
    """
    rank = F.array_position(F.array(*map(F.lit, DUE_EVENTS)), F.col("kind"))
    changes = events.where(kind_is(*DUE_EVENTS) & F.col("message_id").isNotNull()).select(
        *MESSAGE, F.col("time").alias("due_time"), rank.alias("due_rank"),
        F.col("due").alias("changed_due"))
    deliveries = messages.select(*MESSAGE, "first_delivery").distinct()
    in_force = (deliveries.join(changes, MESSAGE)
                .where(F.col("first_delivery").isNull()
                       | (F.col("due_time") <= F.col("first_delivery")))
                .groupBy(*MESSAGE)
                .agg(F.max_by("changed_due", F.struct("due_time", "due_rank"))
                     .alias("due_in_force")))
    return messages.join(in_force, MESSAGE, "left")


def moves(events: DataFrame) -> DataFrame:
    """One row per ``dead_lettered`` event: project, queue (the dead-letter queue, the
    event's target), source, message_id, moved_at, claim_count (at the move), body."""
    return events.where(kind_is(ev.DEAD_LETTERED)).select(
        "project", F.col("target").alias("queue"), "source", "message_id",
        F.col("time").alias("moved_at"), "claim_count", "body")


def last_known_expiry(events: DataFrame) -> DataFrame:
    """project, message_id, last_expires: the ``expires`` of the message's latest
    posted, claimed or dead_lettered event.

    Events of one message at the same instant (a fake clock, a fast consumer) are put
    in the order they happened by their claim count, then by EXPIRY_EVENTS.
    """
    rank = F.array_position(F.array(*map(F.lit, EXPIRY_EVENTS)), F.col("kind"))
    order = F.struct(F.col("time"), F.coalesce(F.col("claim_count"), F.lit(0)), rank)
    return (events.where(kind_is(*EXPIRY_EVENTS)).groupBy(*MESSAGE)
            .agg(F.max_by("expires", order).alias("last_expires")))


def _explicit_ends(stays: DataFrame, events: DataFrame) -> DataFrame:
    """STAY, explicit_time, explicit_kind: the first ending event of the message in the
    stay's queue at or after its start."""
    endings = events.where(kind_is(*MESSAGE_ENDINGS) & F.col("message_id").isNotNull()).select(
        "project", "queue", "message_id", F.col("time").alias("ending_time"),
        F.col("kind").alias("ending_kind"))
    return (stays.join(endings, ["project", "queue", "message_id"])
            .where(F.col("ending_time") >= F.col("start"))
            .groupBy(*STAY)
            .agg(F.min("ending_time").alias("explicit_time"),
                 F.min_by("ending_kind", "ending_time").alias("explicit_kind")))


def _first_purges(stays: DataFrame, events: DataFrame) -> DataFrame:
    """STAY, purge_time: the first purge of the stay's queue at or after its start."""
    purges = events.where(kind_is(ev.PURGED)).select(
        "project", "queue", F.col("time").alias("purge_time"))
    return (stays.join(purges, ["project", "queue"])
            .where(F.col("purge_time") >= F.col("start"))
            .groupBy(*STAY).agg(F.min("purge_time").alias("purge_time")))


def ends(stays: DataFrame, events: DataFrame, as_of: float) -> DataFrame:
    """*stays* (columns STAY and any others) with ``end_time`` and ``end_kind``.

    The end of a stay is the first ending event (popped, deleted, dead_lettered,
    expired) of the message in the queue at or after ``start``: it proves the message
    lived until then. Without one, it is the earlier of the queue's first purge at or
    after ``start`` and the implicit expiry: the message's last known expiry when that
    is at or before *as_of* (MongoDB writes no ``expired`` events; Redis and Swift write
    them only when they reap, so a message Swift dropped unreaped has none: an explicit
    ``expired`` event is the ending, never counted again as an implicit one). An
    implicit expiry counts as ``expired`` and wins a tie with a purge (a message is gone
    at its expiry instant). An implicit expiry before ``start`` (a message moved to a
    dead-letter queue keeps its original expiry, which claims may have outlived) is
    taken at ``start``: the message expired on arrival.
    Stays with no end have null ``end_time`` and ``end_kind``.
    """
    keys = stays.select(*STAY).distinct()
    expiry = last_known_expiry(events).where(F.col("last_expires") <= F.lit(as_of))
    found = (keys.join(_explicit_ends(keys, events), STAY, "left")
             .join(_first_purges(keys, events), STAY, "left")
             .join(expiry, MESSAGE, "left"))
    explicit = F.col("explicit_time").isNotNull()
    implicit_time = F.greatest(F.col("last_expires"), F.col("start"))
    implicit_first = F.col("last_expires").isNotNull() & (
        F.col("purge_time").isNull() | (implicit_time <= F.col("purge_time")))
    ended = found.select(
        *STAY,
        F.when(explicit, F.col("explicit_time"))
         .when(implicit_first, implicit_time)
         .otherwise(F.col("purge_time")).alias("end_time"),
        F.when(explicit, F.col("explicit_kind"))
         .when(implicit_first, F.lit(ev.EXPIRED))
         .when(F.col("purge_time").isNotNull(), F.lit(ev.PURGED)).alias("end_kind"))
    return stays.join(ended, STAY, "left")
