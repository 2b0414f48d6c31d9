"""The delay audit: are delays honoured, and how late do delayed messages arrive?

One row per ``(project, queue)`` with at least one ``posted`` event (docs/audits.md):

- ``messages``: posted events; ``delayed``: those with delay = due - posted_at > 0
  (the due time of the post);
- ``delay_seconds``: distribution of the delays of delayed messages (null when none);
- ``delivered``: delayed messages with a first delivery (first claim or pop, any queue);
- ``lateness_seconds``: distribution of first delivery - due in force over them;
- ``early_deliveries``: delayed messages first delivered before the due in force
  (must be 0); ``early_delivery_ids``: up to ``trail.SAMPLE_IDS`` of their ids, the
  earliest (relative to its due time) first;
- ``expired_before_due``: delayed messages never delivered whose stay ended by expiry
  (an ``expired`` event or the implicit expiry) at or before their due in force;
- ``waiting``: delayed messages not delivered, not ended, due in force after the audit
  time.

The *due in force* is the post's due, or an edit's (``trail.due_in_force``): the latest
at or before the first delivery, or, for a message not delivered, the latest of all.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from delayq import events as ev
from delayq.spark_jobs import stats, trail
from delayq.spark_jobs.trail import Trail

QUEUE = trail.QUEUE

ROW_SCHEMA = StructType([
    StructField("project", StringType(), False),
    StructField("queue", StringType(), False),
    StructField("messages", LongType(), False),
    StructField("delayed", LongType(), False),
    StructField("delay_seconds", stats.DISTRIBUTION_TYPE, True),
    StructField("delivered", LongType(), False),
    StructField("lateness_seconds", stats.DISTRIBUTION_TYPE, True),
    StructField("early_deliveries", LongType(), False),
    StructField("early_delivery_ids", ArrayType(StringType(), False), False),
    StructField("expired_before_due", LongType(), False),
    StructField("waiting", LongType(), False),
])
FIELDS = tuple(ROW_SCHEMA.fieldNames())


def posted_stays(source: Trail, queues: Collection[str] | None = None) -> DataFrame:
    """Every message posted (to one of *queues*, when given) with its delay, first
    delivery, due in force and how its stay in the queue it was posted to ended
    (``trail.Trail``)."""
    posts = source.stays(ev.POSTED)
    if queues is not None:
        posts = posts.where(F.col("queue").isin(*queues))
    return posts


def per_queue(stays: DataFrame, as_of: float) -> DataFrame:
    """The audit's figures per queue, distributions not yet rounded."""
    delayed = F.col("delay") > 0
    delivered = delayed & F.col("first_delivery").isNotNull()
    undelivered = delayed & F.col("first_delivery").isNull()
    due = F.col("due_in_force")
    lateness = F.col("first_delivery") - due
    early = delivered & (F.col("first_delivery") < due)
    # Most early first (the most negative lateness), then by id.
    early_examples = F.array_sort(F.collect_list(F.when(early, F.struct(
        lateness.alias("lateness"), F.col("message_id").alias("id")))))
    return stays.groupBy(*QUEUE).agg(
        F.count(F.lit(1)).alias("messages"),
        F.count_if(delayed).alias("delayed"),
        stats.distribution(F.when(delayed, F.col("delay"))).alias("delay_seconds"),
        F.count_if(delivered).alias("delivered"),
        stats.distribution(F.when(delivered, lateness)).alias("lateness_seconds"),
        F.count_if(early).alias("early_deliveries"),
        F.transform(F.slice(early_examples, 1, trail.SAMPLE_IDS), lambda e: e["id"])
         .alias("early_delivery_ids"),
        F.count_if(undelivered & (F.col("end_kind") == F.lit(ev.EXPIRED))
                   & (F.col("end_time") <= due)).alias("expired_before_due"),
        F.count_if(undelivered & F.col("end_time").isNull()
                   & (due > F.lit(as_of))).alias("waiting"),
    )


def as_row(collected: Any) -> dict[str, Any]:
    """A collected per_queue() row as the audit reports it (JSON-ready, rounded)."""
    row = collected.asDict()
    for name in ("delay_seconds", "lateness_seconds"):
        row[name] = stats.summary(collected[name])
    row["early_delivery_ids"] = list(collected["early_delivery_ids"])
    return {name: row[name] for name in FIELDS}


def rows(source: Trail, queues: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The delay audit of *source*, sorted by project and queue; only the rows of
    *queues* when given."""
    stays = posted_stays(source, queues)
    found = [as_row(r) for r in per_queue(stays, source.as_of).collect()]
    return sorted(found, key=lambda r: (r["project"], r["queue"]))


def run(events: DataFrame, as_of: float, queues: Collection[str] | None = None
        ) -> list[dict[str, Any]]:
    """The delay audit of *events* (the trail) as of *as_of*; see ``rows``."""
    return rows(Trail.of(events, as_of), queues)
