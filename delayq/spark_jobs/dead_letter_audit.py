"""The dead-letter audit: what ends up dead-lettered, after how many claims, for how long,
and how it left.

One row per ``(project, queue, source)``, ``queue`` being the dead-letter queue (the
``dead_lettered`` event's target) and ``source`` the queue the message left
(docs/audits.md):

- ``moved``: dead_lettered events; ``moved_messages``: the distinct messages they moved
  (a message redriven and moved again counts once);
- ``received``: the messages ``source`` received (posted to it, moved or redriven into
  it); ``dead_letter_rate``: ``moved / received``;
- ``claim_count``: ``{"histogram": {"<count>": n}, "p50", "max"}`` of the claim count at
  the move;
- ``time_in_dlq_seconds``: distribution of (end of the stay in the dead-letter queue) -
  move time over moved messages that have left it; ``left`` counts them and
  ``still_in_dlq`` the others; ``endings`` splits ``left`` by the kind of event that
  ended the stay (ENDINGS);
- ``latest_moved_ids``: up to ``trail.SAMPLE_IDS`` ids of the messages moved last,
  newest first;
- ``top_keys`` / ``top_values``: up to TOP body keys (dotted paths, ``bodies``) and
  (key, scalar value) pairs most common among the moved messages, each counted once per
  message; by count descending, then key (then value) ascending.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from delayq import events as ev
from delayq.spark_jobs import bodies, stats, trail
from delayq.spark_jobs.trail import Trail

ROW = ("project", "queue", "source")
TOP = 10
# How a stay in a dead-letter queue ends: the kind of the event that ended it
# (dead_lettered: moved on to another dead-letter queue).
ENDINGS = (ev.DELETED, ev.POPPED, ev.EXPIRED, ev.REDRIVEN, ev.DEAD_LETTERED, ev.PURGED)

CLAIM_COUNT_TYPE = StructType([
    StructField("histogram", MapType(StringType(), LongType(), False), False),
    StructField("p50", DoubleType(), False),
    StructField("max", LongType(), False),
])
ENDINGS_TYPE = StructType([StructField(kind, LongType(), False) for kind in ENDINGS])
TOP_KEY_TYPE = StructType([StructField("key", StringType(), False),
                           StructField("count", LongType(), False)])
TOP_VALUE_TYPE = StructType([StructField("key", StringType(), False),
                             StructField("value", StringType(), False),
                             StructField("count", LongType(), False)])
ROW_SCHEMA = StructType([
    StructField("project", StringType(), False),
    StructField("queue", StringType(), False),
    StructField("source", StringType(), False),
    StructField("moved", LongType(), False),
    StructField("moved_messages", LongType(), False),
    StructField("received", LongType(), False),
    StructField("dead_letter_rate", DoubleType(), True),
    StructField("claim_count", CLAIM_COUNT_TYPE, False),
    StructField("time_in_dlq_seconds", stats.DISTRIBUTION_TYPE, True),
    StructField("left", LongType(), False),
    StructField("still_in_dlq", LongType(), False),
    StructField("endings", ENDINGS_TYPE, False),
    StructField("latest_moved_ids", ArrayType(StringType(), False), False),
    StructField("top_keys", ArrayType(TOP_KEY_TYPE, False), False),
    StructField("top_values", ArrayType(TOP_VALUE_TYPE, False), False),
])
FIELDS = tuple(ROW_SCHEMA.fieldNames())


def selected_moves(source: Trail, queues: Collection[str] | None) -> DataFrame:
    """One row per move (the dead_lettered stays of ``trail.Trail``), only those into or
    out of *queues* when given: ROW, message_id, moved_at, claim_count, body, end_time,
    end_kind."""
    moves = source.stays(ev.DEAD_LETTERED).select(
        *ROW, "message_id", F.col("start").alias("moved_at"), "claim_count", "body",
        "end_time", "end_kind")
    if queues is not None:
        moves = moves.where(F.col("queue").isin(*queues) | F.col("source").isin(*queues))
    return moves


def per_row(moves: DataFrame) -> DataFrame:
    """Counts, endings, claim-count median and maximum, time in the dead-letter queue
    and the latest moved messages per row, not yet rounded."""
    left = F.col("end_time").isNotNull()
    # Newest move first, then by id; a message moved twice keeps its latest place.
    latest = F.array_sort(F.collect_list(F.struct(
        (-F.col("moved_at")).alias("order"), F.col("message_id").alias("id"))))
    return moves.groupBy(*ROW).agg(
        F.count(F.lit(1)).alias("moved"),
        F.count_distinct("message_id").alias("moved_messages"),
        stats.median(F.col("claim_count")).alias("claim_p50"),
        F.max("claim_count").alias("claim_max"),
        stats.distribution(F.when(left, F.col("end_time") - F.col("moved_at")))
         .alias("time_in_dlq_seconds"),
        F.count_if(left).alias("left"),
        F.struct(*(F.count_if(F.col("end_kind") == F.lit(kind)).alias(kind)
                   for kind in ENDINGS)).alias("endings"),
        F.slice(F.array_distinct(F.transform(latest, lambda e: e["id"])), 1,
                trail.SAMPLE_IDS).alias("latest_moved_ids"),
    )


def figures(moves: DataFrame, source: Trail) -> DataFrame:
    """per_row() with ``histogram`` (the claim counts at the move and how many moves
    had each, increasing) and ``received`` (the arrivals of messages in the source:
    posted to it, moved or redriven into it), in one query."""
    histograms = (moves.where(F.col("claim_count").isNotNull())
                  .groupBy(*ROW, "claim_count").count().groupBy(*ROW)
                  .agg(F.sort_array(F.collect_list(F.struct("claim_count", "count")))
                       .alias("histogram")))
    arrivals = (source.arrivals.groupBy("project", F.col("queue").alias("source"))
                .agg(F.count(F.lit(1)).alias("received")))
    return (per_row(moves).join(histograms, list(ROW), "left")
            .join(arrivals, ["project", "source"], "left"))


def _top(counted: DataFrame, order: list[Column]) -> DataFrame:
    """The first TOP rows of each audit row of *counted*, in *order*, with their rank."""
    window = Window.partitionBy(*ROW).orderBy(*order)
    return counted.withColumn("rank", F.row_number().over(window)).where(F.col("rank") <= TOP)


def _top_rows(walk: bodies.Walk) -> DataFrame:
    """The top keys and (key, value) pairs of each row, ranked, and one row (``deeper``
    above 0) when the walk left objects unwalked: one query."""
    pairs = walk.pairs
    # distinct() per message: a key (or pair) counts once however often a body has it,
    # or however often the message was moved.
    keys = pairs.select(*ROW, "message_id", "key").distinct().groupBy(*ROW, "key").count()
    values = (pairs.where(F.col("value").isNotNull()).distinct()
              .groupBy(*ROW, "key", "value").count())
    no_value = F.lit(None).cast("string")
    top_keys = _top(keys, [F.desc("count"), F.asc("key")]).select(
        *ROW, "rank", "key", no_value.alias("value"), "count",
        F.lit(True).alias("of_keys"), F.lit(0).cast("long").alias("deeper"))
    top_values = _top(values, [F.desc("count"), F.asc("key"), F.asc("value")]).select(
        *ROW, "rank", "key", "value", "count", F.lit(False).alias("of_keys"),
        F.lit(0).cast("long").alias("deeper"))
    deeper = walk.deeper.agg(F.count(F.lit(1)).alias("deeper")).select(
        *(no_value.alias(name) for name in ROW), F.lit(0).alias("rank"),
        no_value.alias("key"), no_value.alias("value"), F.lit(0).cast("long").alias("count"),
        F.lit(False).alias("of_keys"), "deeper")
    return top_keys.unionByName(top_values).unionByName(deeper)


def top_lists(moves: DataFrame) -> tuple[dict[tuple, list], dict[tuple, list]]:
    """Per row, the top keys and the top (key, value) pairs of the moved bodies."""
    depth = bodies.DEPTH
    while True:
        with bodies.key_values(moves.select(*ROW, "message_id", "body"),
                               [*ROW, "message_id"], depth) as walk:
            found = _top_rows(walk).collect()
        if not any(r["deeper"] for r in found):
            break
        depth *= 2
    keys_by_row: dict[tuple, list] = defaultdict(list)
    values_by_row: dict[tuple, list] = defaultdict(list)
    for r in sorted(found, key=lambda r: r["rank"]):
        if r["rank"] == 0:
            continue
        if r["of_keys"]:
            keys_by_row[_key(r)].append({"key": r["key"], "count": r["count"]})
        else:
            values_by_row[_key(r)].append({"key": r["key"], "value": r["value"],
                                           "count": r["count"]})
    return keys_by_row, values_by_row


def _key(collected: Any) -> tuple:
    return tuple(collected[name] for name in ROW)


def rate(moved: int, arrivals: int) -> float | None:
    """moved / arrivals, rounded as figures are; None when nothing arrived."""
    return stats.rounded(moved / arrivals) if arrivals else None


def rows(source: Trail, queues: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The dead-letter audit of *source*, sorted by project, queue and source; only moves
    into or out of *queues* when given."""
    moves = selected_moves(source, queues).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        found = figures(moves, source).collect()
        if not found:
            return []
        top_keys, top_values = top_lists(moves)
    finally:
        moves.unpersist()
    return sorted((as_row(r, top_keys.get(_key(r), []), top_values.get(_key(r), []))
                   for r in found), key=lambda r: (r["project"], r["queue"], r["source"]))


def as_row(r: Any, top_keys: list, top_values: list) -> dict[str, Any]:
    """A collected figures() row, with its top lists, as the audit reports it."""
    received = r["received"] or 0
    return {
        "project": r["project"], "queue": r["queue"], "source": r["source"],
        "moved": r["moved"], "moved_messages": r["moved_messages"],
        "received": received, "dead_letter_rate": rate(r["moved"], received),
        "claim_count": {"histogram": {str(h["claim_count"]): h["count"]
                                      for h in r["histogram"] or ()},
                        "p50": stats.rounded(r["claim_p50"]), "max": r["claim_max"]},
        "time_in_dlq_seconds": stats.summary(r["time_in_dlq_seconds"]),
        "left": r["left"], "still_in_dlq": r["moved"] - r["left"],
        "endings": r["endings"].asDict(),
        "latest_moved_ids": list(r["latest_moved_ids"]),
        "top_keys": top_keys, "top_values": top_values,
    }


def run(events: DataFrame, as_of: float, queues: Collection[str] | None = None
        ) -> list[dict[str, Any]]:
    """The dead-letter audit of *events* (the trail) as of *as_of*; see ``rows``."""
    return rows(Trail.of(events, as_of), queues)
