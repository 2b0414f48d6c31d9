"""The dead-letter audit: what ends up dead-lettered, after how many claims, for how long.

One row per ``(project, queue, source)``, ``queue`` being the dead-letter queue (the
``dead_lettered`` event's target) and ``source`` the queue the message left
(docs/audits.md):

- ``moved``: dead_lettered events;
- ``claim_count``: ``{"histogram": {"<count>": n}, "p50", "max"}`` of the claim count at
  the move;
- ``time_in_dlq_seconds``: distribution of (end of the stay in the dead-letter queue) -
  move time over moved messages that have left it; ``left`` counts them (deleted,
  popped, expired, purged or moved on) and ``still_in_dlq`` the others;
- ``top_keys`` / ``top_values``: up to TOP body keys (dotted paths, ``bodies``) and
  (key, scalar value) pairs most common among the moved messages, each counted once per
  message; by count descending, then key (then value) ascending.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import Any

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

from delayq.spark_jobs import bodies, stats, trail

ROW = ("project", "queue", "source")
TOP = 10

CLAIM_COUNT_TYPE = StructType([
    StructField("histogram", MapType(StringType(), LongType(), False), False),
    StructField("p50", DoubleType(), False),
    StructField("max", LongType(), False),
])
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
    StructField("claim_count", CLAIM_COUNT_TYPE, False),
    StructField("time_in_dlq_seconds", stats.DISTRIBUTION_TYPE, True),
    StructField("left", LongType(), False),
    StructField("still_in_dlq", LongType(), False),
    StructField("top_keys", ArrayType(TOP_KEY_TYPE, False), False),
    StructField("top_values", ArrayType(TOP_VALUE_TYPE, False), False),
])
FIELDS = tuple(ROW_SCHEMA.fieldNames())

KEY_VALUE_TYPE = ArrayType(StructType([StructField("key", StringType(), False),
                                       StructField("value", StringType(), True)]))
body_key_values = F.udf(bodies.body_key_values, KEY_VALUE_TYPE)


def selected_moves(events: DataFrame, queues: Collection[str] | None) -> DataFrame:
    """The moves (trail.moves), only those into or out of *queues* when given."""
    moves = trail.moves(events)
    if queues is not None:
        moves = moves.where(F.col("queue").isin(*queues) | F.col("source").isin(*queues))
    return moves


def per_row(moves: DataFrame, events: DataFrame, as_of: float) -> DataFrame:
    """Counts, claim-count median and maximum, and time in the dead-letter queue per
    row, not yet rounded."""
    stays = trail.ends(moves.withColumn("start", F.col("moved_at")), events, as_of)
    left = F.col("end_time").isNotNull()
    return stays.groupBy(*ROW).agg(
        F.count(F.lit(1)).alias("moved"),
        stats.median(F.col("claim_count")).alias("claim_p50"),
        F.max("claim_count").alias("claim_max"),
        stats.distribution(F.when(left, F.col("end_time") - F.col("moved_at")))
         .alias("time_in_dlq_seconds"),
        F.count_if(left).alias("left"),
    )


def claim_histograms(moves: DataFrame) -> dict[tuple, dict[str, int]]:
    """Per row, ``{"<claim count>": moves}`` in increasing claim count."""
    counted = (moves.where(F.col("claim_count").isNotNull())
               .groupBy(*ROW, "claim_count").count().collect())
    histograms: dict[tuple, dict[str, int]] = defaultdict(dict)
    for r in sorted(counted, key=lambda r: r["claim_count"]):
        histograms[_key(r)][str(r["claim_count"])] = r["count"]
    return histograms


def _top(counted: DataFrame, order: list[Column]) -> DataFrame:
    """The first TOP rows of each audit row of *counted*, in *order*, with their rank."""
    window = Window.partitionBy(*ROW).orderBy(*order)
    return counted.withColumn("rank", F.row_number().over(window)).where(F.col("rank") <= TOP)


def top_lists(moves: DataFrame) -> tuple[dict[tuple, list], dict[tuple, list]]:
    """Per row, the top keys and the top (key, value) pairs of the moved bodies."""
    pairs = (moves.select(*ROW, "message_id", F.explode(body_key_values("body")).alias("kv"))
             .select(*ROW, "message_id", "kv.key", "kv.value"))
    # distinct() per message: a key (or pair) counts once however often a body has it.
    keys = pairs.select(*ROW, "message_id", "key").distinct().groupBy(*ROW, "key").count()
    values = (pairs.where(F.col("value").isNotNull()).distinct()
              .groupBy(*ROW, "key", "value").count())
    top_keys = _top(keys, [F.desc("count"), F.asc("key")]).collect()
    top_values = _top(values, [F.desc("count"), F.asc("key"), F.asc("value")]).collect()
    keys_by_row: dict[tuple, list] = defaultdict(list)
    for r in sorted(top_keys, key=lambda r: r["rank"]):
        keys_by_row[_key(r)].append({"key": r["key"], "count": r["count"]})
    values_by_row: dict[tuple, list] = defaultdict(list)
    for r in sorted(top_values, key=lambda r: r["rank"]):
        values_by_row[_key(r)].append({"key": r["key"], "value": r["value"],
                                       "count": r["count"]})
    return keys_by_row, values_by_row


def _key(collected: Any) -> tuple:
    return tuple(collected[name] for name in ROW)


def run(events: DataFrame, as_of: float, queues: Collection[str] | None = None
        ) -> list[dict[str, Any]]:
    """The dead-letter audit of *events* (already cut at *as_of*), sorted by project,
    queue and source; only moves into or out of *queues* when given."""
    moves = selected_moves(events, queues)
    figures = per_row(moves, events, as_of).collect()
    histograms = claim_histograms(moves)
    top_keys, top_values = top_lists(moves)
    rows = []
    for r in figures:
        key = _key(r)
        rows.append({
            "project": r["project"], "queue": r["queue"], "source": r["source"],
            "moved": r["moved"],
            "claim_count": {"histogram": histograms.get(key, {}),
                            "p50": stats.rounded(r["claim_p50"]), "max": r["claim_max"]},
            "time_in_dlq_seconds": stats.summary(r["time_in_dlq_seconds"]),
            "left": r["left"], "still_in_dlq": r["moved"] - r["left"],
            "top_keys": top_keys.get(key, []), "top_values": top_values.get(key, []),
        })
    return sorted(rows, key=lambda r: (r["project"], r["queue"], r["source"]))
